//===- tests/fuzz/FuzzOnnx.cpp - libFuzzer: ONNX bytes -> IR --------------===//
//
// The importer on arbitrary bytes, then what follows it in pipec without
// the kernels: the verifier and every node's shape rule in graph order (the
// types inferShapes would give, minus constant folding). Each input binds
// the batch to 2, so symbolic models get that far too.
//
//===----------------------------------------------------------------------===//
#include "frontend/OnnxImporter.h"
#include "ir/Verifier.h"
#include "ir/shape/ShapeRules.h"

#include <cstddef>
#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace pipec;
  frontend::ImportOptions opts;
  opts.batch = 2;
  auto g = frontend::importOnnxBytes(std::string(reinterpret_cast<const char *>(data), size), ".",
                                     opts);
  if (!g)
    return 0;
  (void)ir::verifyGraph(**g);
  for (ir::Node *n : (*g)->nodes()) {
    bool typed = true;
    for (const ir::Value *v : n->inputs())
      typed = typed && (!v || v->typeKnown());
    if (!typed)
      continue;
    std::vector<TensorDesc> types;
    if (ir::inferNodeTypes(*n, (*g)->opset(n->domain()), types).isOk())
      for (size_t i = 0; i < types.size(); ++i)
        n->output(i)->setType(types[i]);
  }
  return 0;
}
