//===- samples/gen/Mlp.cpp - The multilayer perceptron sample -------------===//
//
// x [batch, in] -> L x (Gemm(transB=1) + Relu), no Relu after the last
// Gemm -> logits [batch, out]; with --with-loss, SoftmaxCrossEntropyLoss
// (mean) against int64 labels [batch] -> loss []. Weights are stored
// [out_features, in_features] as PyTorch's nn.Linear exports them.
//
//===----------------------------------------------------------------------===//
#include "samples/gen/Models.h"

namespace pipec::samples {

Expected<BuiltModel> buildMlp(const MlpOptions &o, const CommonOptions &c) {
  PIPEC_TRY(checkSize("--layers", o.layers, 100000));
  PIPEC_TRY(checkSize("--hidden", o.hidden, 1 << 24));
  PIPEC_TRY(checkSize("--in", o.in, 1 << 24));
  PIPEC_TRY(checkSize("--out", o.out, 1 << 24));

  ModelBuilder b("mlp", c.seed, c.batch, c.maxWeightMiB << 20, c.zeroWeights);
  b.addInput("x", onnx::TensorProto::FLOAT, {b.batchDim(), o.in});
  std::string h = "x";
  int64_t fanIn = o.in;
  for (int64_t l = 0; l < o.layers; ++l) {
    bool last = l + 1 == o.layers;
    int64_t width = last ? o.out : o.hidden;
    std::string p = "layer" + std::to_string(l);
    std::string w = b.weight(p + "/fc.weight", {width, fanIn},
                             last ? Init::lecun(fanIn) : Init::he(fanIn));
    std::string bias = b.weight(p + "/fc.bias", {width}, Init::bias(fanIn));
    h = b.node("Gemm", p + "/fc", {h, w, bias}, {Attr::i("transB", 1)},
               last ? "logits" : "");
    if (!last)
      h = b.node("Relu", p + "/relu", {h});
    fanIn = width;
  }
  b.addOutput("logits", onnx::TensorProto::FLOAT, {b.batchDim(), o.out});
  if (c.withLoss) {
    b.addInput("labels", onnx::TensorProto::INT64, {b.batchDim()});
    b.node("SoftmaxCrossEntropyLoss", "loss/sce", {"logits", "labels"},
           {Attr::s("reduction", "mean")}, "loss");
    b.addOutput("loss", onnx::TensorProto::FLOAT, {});
  }
  auto md = commonMetadata("mlp", c);
  return b.finish(cat("pipec sample MLP: ", o.layers, " layers, in ", o.in, ", hidden ",
                      o.hidden, ", out ", o.out, c.withLoss ? ", with loss" : ""),
                  md);
}

} // namespace pipec::samples
