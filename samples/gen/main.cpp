//===- samples/gen/main.cpp - pipec-samples: write sample ONNX models -----===//
//
//   pipec-samples mlp -o mlp.onnx [--layers 8 --hidden 1024 ...]
//   pipec-samples gpt -o gpt.onnx [--layers 12 --dmodel 768 --heads 12 ...]
//   pipec-samples cnn -o cnn.onnx [--stages 4 --blocks 2 ...]
//
// Every error (a bad size, an unwritable path) is one line on stderr and
// exit status 1. The models and their options: docs/samples.md.
//
//===----------------------------------------------------------------------===//
#include "samples/gen/ModelWriter.h"
#include "samples/gen/Models.h"
#include "support/FileIO.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <functional>
#include <iostream>

using namespace pipec;
using namespace pipec::samples;

namespace {

/// Options that every subcommand takes, bound to one shared struct.
struct Cli {
  CommonOptions common;
  int64_t batch = 0;
  std::string output;
  bool externalData = false;
  bool quiet = false;
  std::string canonical; ///< the subcommand and its sizes, for metadata
};

void addCommon(CLI::App &sub, Cli &cli) {
  sub.add_option("-o,--output", cli.output, "where to write the model (.onnx)")
      ->required()
      ->type_name("FILE");
  sub.add_option("--batch", cli.batch,
                 "fixed batch size (default: symbolic dimension 'batch')");
  sub.add_flag("--with-loss", cli.common.withLoss,
               "add an int64 'labels' input and a SoftmaxCrossEntropyLoss 'loss' output");
  sub.add_option("--seed", cli.common.seed, "weight generator seed")
      ->capture_default_str();
  sub.add_flag("--external-data", cli.externalData,
               "store weights in FILE.data (automatic above 1 GiB of weights)");
  sub.add_flag("--zero-weights", cli.common.zeroWeights,
               "weights are zeros in a sparse FILE.data (no disk, no generation; for "
               "compile-time and memory tests of large models)");
  sub.add_option("--max-weight-mib", cli.common.maxWeightMiB,
                 "refuse models with more weight bytes than this")
      ->capture_default_str();
  sub.add_flag("-q,--quiet", cli.quiet, "do not print the summary line");
}

std::string withCommas(uint64_t n) {
  std::string digits = std::to_string(n), s;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0)
      s += ',';
    s += digits[i];
  }
  return s;
}

std::string describeCommon(const Cli &cli) {
  std::string s;
  if (cli.common.batch)
    s += cat(" --batch ", *cli.common.batch);
  if (cli.common.withLoss)
    s += " --with-loss";
  if (cli.common.zeroWeights)
    s += " --zero-weights";
  return s + cat(" --seed ", cli.common.seed);
}

int fail(const std::string &message) {
  std::cerr << "pipec-samples: error: " << message << "\n";
  return 1;
}

} // namespace

int main(int argc, char **argv) {
  CLI::App app("Writes the sample ONNX models pipec is tested and benchmarked on "
               "(opset 17, float32, deterministic weights).",
               "pipec-samples");
  app.require_subcommand(1);
  app.footer("Examples:\n"
             "  pipec-samples mlp -o mlp.onnx --layers 8 --hidden 1024\n"
             "  pipec-samples gpt -o gpt.onnx --layers 12 --dmodel 768 --heads 12 "
             "--seq 256 --vocab 50257 --with-loss\n"
             "  pipec-samples cnn -o cnn.onnx --stages 4 --blocks 2 --width 64 --image 224");

  Cli cli;
  MlpOptions mlp;
  GptOptions gpt;
  CnnOptions cnn;

  CLI::App *mlpCmd = app.add_subcommand(
      "mlp", "x [batch, in] -> layers of Gemm+Relu -> logits [batch, out]");
  mlpCmd->add_option("--layers", mlp.layers, "Gemm layers")->capture_default_str();
  mlpCmd->add_option("--hidden", mlp.hidden, "hidden width")->capture_default_str();
  mlpCmd->add_option("--in", mlp.in, "input features")->capture_default_str();
  mlpCmd->add_option("--out", mlp.out, "output classes")->capture_default_str();
  addCommon(*mlpCmd, cli);

  CLI::App *gptCmd = app.add_subcommand(
      "gpt", "tokens [batch, seq] -> pre-LN causal decoder -> logits [batch, seq, vocab]");
  gptCmd->add_option("--layers", gpt.layers, "decoder blocks")->capture_default_str();
  gptCmd->add_option("--dmodel", gpt.dmodel, "model width")->capture_default_str();
  gptCmd->add_option("--heads", gpt.heads, "attention heads (must divide --dmodel)")
      ->capture_default_str();
  gptCmd->add_option("--seq", gpt.seq, "sequence length")->capture_default_str();
  gptCmd->add_option("--vocab", gpt.vocab, "vocabulary size")->capture_default_str();
  gptCmd->add_flag("--tie-embeddings", gpt.tieEmbeddings,
                   "lm_head is the transposed token embedding (one weight, two stages)");
  gptCmd->add_option("--dropout", gpt.dropout,
                     "GPT-2's residual dropout: this ratio on the attention's and the MLP's outputs (0: none)")
      ->capture_default_str();
  addCommon(*gptCmd, cli);

  CLI::App *cnnCmd = app.add_subcommand(
      "cnn", "image [batch, 3, H, W] -> ResNet-like stages -> logits [batch, classes]");
  cnnCmd->add_option("--stages", cnn.stages, "stages (each after the first halves H, W)")
      ->capture_default_str();
  cnnCmd->add_option("--blocks", cnn.blocks, "residual blocks per stage")
      ->capture_default_str();
  cnnCmd->add_option("--width", cnn.width, "channels of the first stage (doubling per stage)")
      ->capture_default_str();
  cnnCmd->add_option("--image", cnn.image, "image height and width")->capture_default_str();
  cnnCmd->add_option("--classes", cnn.classes, "output classes")->capture_default_str();
  addCommon(*cnnCmd, cli);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp &e) {
    // Top-level --help lists every subcommand's options.
    if (app.get_subcommands().empty()) {
      std::cout << app.help("", CLI::AppFormatMode::All);
      return 0;
    }
    return app.exit(e);
  } catch (const CLI::ParseError &e) {
    if (e.get_exit_code() == 0)
      return app.exit(e);
    fail(e.what());
    std::cerr << "run 'pipec-samples --help' for the models and their options\n";
    return 1;
  }

  if (mlpCmd->parsed() + gptCmd->parsed() + cnnCmd->parsed() != 1)
    return fail("give exactly one of mlp, gpt, cnn");
  if (mlpCmd->count("--batch") + gptCmd->count("--batch") + cnnCmd->count("--batch")) {
    if (cli.batch < 1)
      return fail(cat("--batch must be at least 1, got ", cli.batch));
    cli.common.batch = cli.batch;
  }
  if (cli.common.maxWeightMiB < 1 || cli.common.maxWeightMiB > (uint64_t(1) << 30))
    return fail(cat("--max-weight-mib must be between 1 and 1073741824, got ",
                    cli.common.maxWeightMiB));
  // Fail before generating (possibly gigabytes) when the file cannot be written.
  std::string dir = dirName(cli.output);
  if (!isDirectory(dir))
    return fail(cat("cannot write '", cli.output, "': directory '", dir,
                    "' does not exist"));
  if (isDirectory(cli.output))
    return fail(cat("cannot write '", cli.output, "': it is a directory"));

  Expected<BuiltModel> model = Status::error("no model");
  if (mlpCmd->parsed()) {
    cli.common.command = cat("pipec-samples mlp --layers ", mlp.layers, " --hidden ",
                             mlp.hidden, " --in ", mlp.in, " --out ", mlp.out,
                             describeCommon(cli));
    model = buildMlp(mlp, cli.common);
  } else if (gptCmd->parsed()) {
    cli.common.command = cat("pipec-samples gpt --layers ", gpt.layers, " --dmodel ",
                             gpt.dmodel, " --heads ", gpt.heads, " --seq ", gpt.seq,
                             " --vocab ", gpt.vocab,
                             gpt.tieEmbeddings ? " --tie-embeddings" : "",
                             gpt.dropout != 0 ? cat(" --dropout ", gpt.dropout) : std::string(),
                             describeCommon(cli));
    model = buildGpt(gpt, cli.common);
  } else {
    cli.common.command = cat("pipec-samples cnn --stages ", cnn.stages, " --blocks ",
                             cnn.blocks, " --width ", cnn.width, " --image ", cnn.image,
                             " --classes ", cnn.classes, describeCommon(cli));
    model = buildCnn(cnn, cli.common);
  }
  if (!model)
    return fail(model.status().message());

  bool external = false;
  Status written = writeModel(model->proto, cli.output,
                              cli.externalData ? ExternalData::Always : ExternalData::Auto,
                              external);
  if (!written)
    return fail(written.withContext(cat("writing '", cli.output, "'")).message());
  if (!cli.quiet) {
    std::cout << "wrote " << cli.output << ": " << withCommas(model->parameters)
              << " parameters (" << withCommas(model->parameters * 4) << " bytes)";
    if (model->buffers)
      std::cout << " + " << withCommas(model->buffers) << " buffer elements";
    std::cout << ", " << model->proto.graph().node_size() << " nodes";
    if (external)
      std::cout << ", weights in " << cli.output << ".data";
    std::cout << "\n";
  }
  return 0;
}
