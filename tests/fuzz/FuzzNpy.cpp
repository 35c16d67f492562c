//===- tests/fuzz/FuzzNpy.cpp - libFuzzer: .npy bytes -> tensor -----------===//
#include "support/Npy.h"

#include <cstddef>
#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  (void)pipec::parseNpy(std::string(reinterpret_cast<const char *>(data), size), "fuzz.npy");
  return 0;
}
