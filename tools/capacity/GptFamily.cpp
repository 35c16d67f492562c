//===- tools/capacity/GptFamily.cpp - The GPT sample as a layer family ----===//
#include "tools/capacity/GptFamily.h"

#include "driver/Driver.h"
#include "frontend/OnnxImporter.h"
#include "passes/Autodiff.h"
#include "passes/Loss.h"
#include "samples/gen/ModelWriter.h"
#include "support/FileIO.h"

#include <cctype>
#include <filesystem>

namespace pipec::capacity {

namespace {

/// l for a node named "block<l>/...", else -1.
int gptBlockOf(const ir::Node &n) {
  const std::string &name = n.name();
  const std::string prefix = "block";
  if (name.compare(0, prefix.size(), prefix) != 0)
    return -1;
  size_t i = prefix.size();
  int l = 0;
  bool digits = false;
  while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i]))) {
    l = l * 10 + (name[i] - '0');
    digits = true;
    ++i;
  }
  return digits && i < name.size() && name[i] == '/' ? l : -1;
}

} // namespace

partitioner::LayerFamily gptFamily(const samples::GptOptions &dims, passes::Precision precision) {
  partitioner::LayerFamily f;
  f.name = cat("gpt dmodel ", dims.dmodel, ", ", dims.heads, " heads, seq ", dims.seq, ", vocab ",
               dims.vocab);
  f.blockOf = gptBlockOf;
  if (precision != passes::Precision::Fp32)
    f.name += precision == passes::Precision::Bf16 ? ", bf16 products" : ", fp16 products";
  f.build = [dims, precision](int64_t blocks, int64_t batch) -> Expected<std::unique_ptr<ir::Graph>> {
    samples::GptOptions go = dims;
    go.layers = blocks;
    samples::CommonOptions co;
    co.batch = batch;
    co.withLoss = true;
    // Shapes only: the weights are holes of a sparse data file that the
    // importer never reads, so width 8192 costs what width 1024 does.
    co.zeroWeights = true;
    PIPEC_ASSIGN(samples::BuiltModel m, samples::buildGpt(go, co));
    std::error_code ec;
    const std::string dir = joinPath(std::filesystem::temp_directory_path(ec).string(),
                                     "pipec-capacity-" + uniqueSuffix());
    PIPEC_TRY(makeDirs(dir));
    struct Cleanup {
      std::string dir;
      ~Cleanup() { (void)removeTree(dir); }
    } cleanup{dir};
    const std::string path = joinPath(dir, cat("gpt", blocks, ".onnx"));
    bool external = false;
    PIPEC_TRY(samples::writeModel(m.proto, path, samples::ExternalData::Always, external));
    m = samples::BuiltModel();
    PIPEC_ASSIGN(std::unique_ptr<ir::Graph> g, frontend::importOnnxFile(path));
    driver::CompileOptions opts;
    opts.emit.training = true; // the graph is differentiated below
    PIPEC_TRY(driver::runPasses(*g, opts));
    PIPEC_ASSIGN(ir::Value * loss, passes::findLoss(*g, "loss"));
    passes::AutodiffOptions ao;
    ao.loss = loss->name();
    PIPEC_TRY(passes::differentiate(*g, ao).status());
    if (precision != passes::Precision::Fp32) {
      passes::MixedPrecisionOptions mo;
      mo.precision = precision;
      PIPEC_TRY(passes::createMixedPrecisionPass(mo)->run(*g).status());
    }
    return g;
  };
  return f;
}

} // namespace pipec::capacity
