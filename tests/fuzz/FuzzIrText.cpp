//===- tests/fuzz/FuzzIrText.cpp - libFuzzer: IR text -> verified graph ---===//
#include "ir/Text.h"
#include "ir/Verifier.h"

#include <cstddef>
#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace pipec;
  auto g = ir::parseGraph(std::string(reinterpret_cast<const char *>(data), size), "fuzz.pir");
  if (g) {
    (void)ir::verifyGraph(**g);
    (void)ir::printGraph(**g);
  }
  return 0;
}
