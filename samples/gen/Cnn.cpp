//===- samples/gen/Cnn.cpp - The ResNet-like CNN sample -------------------===//
//
// image [batch, 3, H, W] -> stem Conv3x3 + BatchNormalization + Relu -> S
// stages of B basic residual blocks (Conv3x3-BN-Relu-Conv3x3-BN, plus the
// input or, where the shape changes, a strided 1x1 Conv + BN projection,
// then Add and Relu) -> GlobalAveragePool -> Flatten -> Gemm -> logits
// [batch, classes]. Stage s has width * 2^s channels; every stage after the
// first halves the resolution in its first block (stride 2, pads 1, so a
// side of n becomes ceil(n/2)). Convolutions have no bias, as BN follows.
//
// BatchNormalization is exported in inference form (training_mode 0, as
// torch.onnx.export does); the running statistics are initializers that
// count as buffers, not parameters. With --with-loss, as for the MLP.
//
//===----------------------------------------------------------------------===//
#include "samples/gen/Models.h"

namespace pipec::samples {

namespace {

std::string conv(ModelBuilder &b, const std::string &name, const std::string &x, int64_t cin,
                 int64_t cout, int64_t kernel, int64_t stride, bool reluAfter) {
  int64_t fanIn = cin * kernel * kernel;
  std::string w = b.weight(name + ".weight", {cout, cin, kernel, kernel},
                           reluAfter ? Init::he(fanIn) : Init::lecun(fanIn));
  int64_t pad = kernel / 2;
  return b.node("Conv", name, {x, w},
                {Attr::ints("kernel_shape", {kernel, kernel}),
                 Attr::ints("strides", {stride, stride}),
                 Attr::ints("pads", {pad, pad, pad, pad})});
}

/// Near-identity affine parameters and running statistics (docs/samples.md).
std::string batchNorm(ModelBuilder &b, const std::string &name, const std::string &x,
                      int64_t c) {
  std::string scale = b.weight(name + ".weight", {c}, Init::range(0.9f, 1.1f));
  std::string bias = b.weight(name + ".bias", {c}, Init::range(-0.1f, 0.1f));
  std::string mean = b.weight(name + ".running_mean", {c}, Init::range(-0.1f, 0.1f), false);
  std::string var = b.weight(name + ".running_var", {c}, Init::range(0.9f, 1.1f), false);
  return b.node("BatchNormalization", name, {x, scale, bias, mean, var},
                {Attr::f("epsilon", 1e-5f), Attr::f("momentum", 0.9f)});
}

std::string block(ModelBuilder &b, const std::string &p, const std::string &x, int64_t cin,
                  int64_t cout, int64_t stride) {
  std::string h = conv(b, p + "/conv1", x, cin, cout, 3, stride, true);
  h = batchNorm(b, p + "/bn1", h, cout);
  h = b.node("Relu", p + "/relu1", {h});
  h = conv(b, p + "/conv2", h, cout, cout, 3, 1, true);
  h = batchNorm(b, p + "/bn2", h, cout);
  std::string skip = x;
  if (stride != 1 || cin != cout) {
    skip = conv(b, p + "/downsample/conv", x, cin, cout, 1, stride, false);
    skip = batchNorm(b, p + "/downsample/bn", skip, cout);
  }
  h = b.node("Add", p + "/add", {h, skip});
  return b.node("Relu", p + "/relu", {h});
}

} // namespace

Expected<BuiltModel> buildCnn(const CnnOptions &o, const CommonOptions &c) {
  PIPEC_TRY(checkSize("--stages", o.stages, 16));
  PIPEC_TRY(checkSize("--blocks", o.blocks, 1000));
  PIPEC_TRY(checkSize("--width", o.width, 1 << 16));
  PIPEC_TRY(checkSize("--image", o.image, 1 << 16));
  PIPEC_TRY(checkSize("--classes", o.classes, 1 << 24));
  int64_t maxWidth = o.width << (o.stages - 1);
  if (maxWidth > (1 << 16))
    return errorf("the last stage would have ", maxWidth,
                  " channels (--width ", o.width, " doubled over ", o.stages - 1,
                  " stages); the limit is 65536");

  ModelBuilder b("cnn", c.seed, c.batch, c.maxWeightMiB << 20, c.zeroWeights);
  b.addInput("image", onnx::TensorProto::FLOAT, {b.batchDim(), 3, o.image, o.image});
  std::string x = conv(b, "stem/conv", "image", 3, o.width, 3, 1, true);
  x = batchNorm(b, "stem/bn", x, o.width);
  x = b.node("Relu", "stem/relu", {x});
  int64_t channels = o.width;
  for (int64_t s = 0; s < o.stages; ++s) {
    int64_t cout = o.width << s;
    for (int64_t j = 0; j < o.blocks; ++j) {
      int64_t stride = (s > 0 && j == 0) ? 2 : 1;
      x = block(b, "stage" + std::to_string(s) + "/block" + std::to_string(j), x, channels,
                cout, stride);
      channels = cout;
    }
  }
  x = b.node("GlobalAveragePool", "head/pool", {x});
  x = b.node("Flatten", "head/flatten", {x}, {Attr::i("axis", 1)});
  std::string w = b.weight("head/fc.weight", {o.classes, channels}, Init::lecun(channels));
  std::string bias = b.weight("head/fc.bias", {o.classes}, Init::bias(channels));
  b.node("Gemm", "head/fc", {x, w, bias}, {Attr::i("transB", 1)}, "logits");
  b.addOutput("logits", onnx::TensorProto::FLOAT, {b.batchDim(), o.classes});
  if (c.withLoss) {
    b.addInput("labels", onnx::TensorProto::INT64, {b.batchDim()});
    b.node("SoftmaxCrossEntropyLoss", "loss/sce", {"logits", "labels"},
           {Attr::s("reduction", "mean")}, "loss");
    b.addOutput("loss", onnx::TensorProto::FLOAT, {});
  }
  return b.finish(cat("pipec sample CNN: ", o.stages, " stages of ", o.blocks,
                      " blocks, width ", o.width, ", image ", o.image, "x", o.image, ", ",
                      o.classes, " classes", c.withLoss ? ", with loss" : ""),
                  commonMetadata("cnn", c));
}

} // namespace pipec::samples
