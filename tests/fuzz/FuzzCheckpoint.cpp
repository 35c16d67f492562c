//===- tests/fuzz/FuzzCheckpoint.cpp - libFuzzer: checkpoint -> tensors ---===//
//
// Input: a manifest's text, a NUL, then the tensors file's bytes. The
// manifest's checksum is set right before parsing, so that mutations reach
// the checks behind it (shapes, offsets, sizes, CRCs) instead of all
// failing the checksum.
//
//===----------------------------------------------------------------------===//
#include "runtime/train/Checkpoint.h"

#include <cstddef>
#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string in(reinterpret_cast<const char *>(data), size);
  const size_t nul = in.find('\0');
  std::string manifest = in.substr(0, nul);
  const std::string tensors = nul == std::string::npos ? "" : in.substr(nul + 1);
  // Set "checksum" to what it must be (a key-value pair the parser reads
  // like any other): the text keeps every other mutation.
  const uint32_t sum = pipec::train::checkpointManifestChecksum(manifest);
  const size_t brace = manifest.rfind('}');
  if (sum && brace != std::string::npos)
    manifest.insert(brace, ", \"checksum\": " + std::to_string(sum));
  (void)pipec::train::parseCheckpoint(manifest, tensors, "fuzz");
  return 0;
}
