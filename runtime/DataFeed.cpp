//===- runtime/DataFeed.cpp - Step inputs for runs and training -----------===//
#include "runtime/DataFeed.h"

#include "support/FileIO.h"
#include "support/Npy.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <random>

namespace pipec::runtime {

int64_t integerBound(const plan::Plan &p, int32_t t) {
  for (const plan::Device &d : p.devices())
    for (const plan::Node &n : d.nodes()) {
      if (n.inputs_size() < 2 || n.inputs(1) != t || n.inputs(0) < 0)
        continue;
      const auto &data = p.tensors(n.inputs(0)).shape();
      if (n.op_type() == "Gather" && data.size() > 0) {
        int64_t axis = 0;
        for (const plan::Attribute &a : n.attrs())
          if (a.name() == "axis")
            axis = a.i();
        if (axis < 0)
          axis += data.size();
        if (axis >= 0 && axis < data.size())
          return data[static_cast<int>(axis)];
      }
      if ((n.op_type() == "SoftmaxCrossEntropyLoss" || n.op_type() == "NegativeLogLikelihoodLoss") &&
          data.size() > 1)
        return data[1];
    }
  return 2;
}

Tensor randomInput(const TensorDesc &d, int64_t bound, uint64_t seed) {
  Tensor t(d);
  std::mt19937_64 rng(seed);
  int64_t n = t.numel();
  switch (d.dtype) {
  case DType::F32: {
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (int64_t i = 0; i < n; ++i)
      t.data<float>()[i] = dist(rng);
    break;
  }
  case DType::F64: {
    std::normal_distribution<double> dist(0.0, 1.0);
    for (int64_t i = 0; i < n; ++i)
      t.data<double>()[i] = dist(rng);
    break;
  }
  case DType::I64:
  case DType::I32: {
    std::uniform_int_distribution<int64_t> dist(0, std::max<int64_t>(bound, 1) - 1);
    for (int64_t i = 0; i < n; ++i) {
      if (d.dtype == DType::I64)
        t.data<int64_t>()[i] = dist(rng);
      else
        t.data<int32_t>()[i] = static_cast<int32_t>(dist(rng));
    }
    break;
  }
  case DType::Bool: {
    std::bernoulli_distribution dist(0.5);
    for (int64_t i = 0; i < n; ++i)
      t.data<uint8_t>()[i] = dist(rng);
    break;
  }
  default:
    break; // zeros
  }
  return t;
}

std::string npyFileName(const std::string &name) {
  std::string s = name;
  for (char &c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-'))
      c = '_';
  return (s.empty() ? "_" : s) + ".npy";
}

Expected<DataFeed> DataFeed::open(const Session &s, const std::string &dataDir, uint64_t seed) {
  DataFeed f;
  f.names_ = s.inputNames();
  f.descs_ = s.stepInputDescs();
  const plan::Plan &p = s.plan();
  if (dataDir.empty()) {
    for (int b = 0; b < kSyntheticBatches; ++b) {
      std::vector<Tensor> batch;
      for (size_t i = 0; i < f.descs_.size(); ++i)
        batch.push_back(randomInput(f.descs_[i], integerBound(p, p.inputs(static_cast<int>(i))),
                                    seed * 1000003 + 7919 * b + i));
      f.pool_.push_back(std::move(batch));
    }
    return f;
  }
  for (size_t i = 0; i < f.names_.size(); ++i) {
    std::string path = joinPath(dataDir, npyFileName(f.names_[i]));
    PIPEC_ASSIGN(Tensor t, readNpy(path));
    const TensorDesc &d = f.descs_[i];
    if (t.dtype() != d.dtype || t.shape().size() != d.shape.size() || t.shape().empty() ||
        !std::equal(t.shape().begin() + 1, t.shape().end(), d.shape.begin() + 1) || t.shape()[0] < 1)
      return errorf("'", path, "' is ", t.desc().str(), "; input '", f.names_[i], "' needs ",
                    dtypeName(d.dtype), "[N", shapeStr(Shape(d.shape.begin() + 1, d.shape.end())).substr(1),
                    " with N examples (N >= 1)");
    // Examples are rows of every file at once: the files must agree on
    // how many there are (an x without its labels would train on garbage).
    if (!f.files_.empty() && t.shape()[0] != f.files_[0].shape()[0])
      return errorf("'", path, "' holds ", t.shape()[0], " examples, '",
                    joinPath(dataDir, npyFileName(f.names_[0])), "' ",
                    f.files_[0].shape()[0], ": every input of --data needs the same number");
    f.files_.push_back(t);
  }
  return f;
}

std::vector<Tensor> DataFeed::batch(int64_t step) const {
  if (files_.empty())
    return pool_[static_cast<size_t>(step) % pool_.size()];
  std::vector<Tensor> out;
  for (size_t i = 0; i < files_.size(); ++i) {
    const Tensor &src = files_[i];
    Tensor t(descs_[i]);
    int64_t rows = descs_[i].shape[0], n = src.shape()[0];
    size_t rowBytes = src.bytes() / static_cast<size_t>(n);
    for (int64_t r = 0; r < rows; ++r) {
      int64_t from = (step * rows + r) % n;
      std::memcpy(static_cast<char *>(t.raw()) + r * rowBytes,
                  static_cast<const char *>(src.raw()) + from * rowBytes, rowBytes);
    }
    out.push_back(t);
  }
  return out;
}

} // namespace pipec::runtime
