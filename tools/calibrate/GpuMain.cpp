//===- tools/calibrate/GpuMain.cpp - pipec-calibrate-gpu ------------------===//
//
// pipec-calibrate-gpu --device cuda|cuda-emulated [--math exact|tf32]
//
// Measures a GPU (calibrateGpu, Calibrate.h) and prints its device profile
// as JSON on stdout; progress goes to stderr. pipec --calibrate --device
// cuda runs it (it links the runtime's CUDA backend, pipec does not) and
// writes or installs the profile. On failure stdout holds {"error": ...}
// and the exit status is 1.
//
//===----------------------------------------------------------------------===//
#include "tools/CliCommon.h"
#include "tools/calibrate/Calibrate.h"

#include <iostream>

using namespace pipec;

int main(int argc, char **argv) {
  CLI::App app{"Measures a GPU into a device profile (JSON on stdout); pipec --calibrate --device cuda runs it"};
  std::string device = "cuda", math = "exact";
  app.add_option("--device", device, "cuda (GPU 0) or cuda-emulated (the emulated GPU, small sizes: tests)");
  app.add_option("--math", math, "--device cuda: exact (the default) or tf32 products");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &e) {
    return tools::cliExit(app, e);
  }
  Expected<calibrate::DeviceProfile> p = tools::guardedValue([&]() -> Expected<calibrate::DeviceProfile> {
    if (device != "cuda" && device != "cuda-emulated")
      return errorf("--device must be cuda or cuda-emulated (got '", device, "')");
    if (math != "exact" && math != "tf32")
      return errorf("--math must be exact or tf32 (got '", math, "')");
    calibrate::GpuCalibrateOptions go;
    go.tf32 = math == "tf32";
    go.name = go.tf32 ? "this-gpu-tf32" : "this-gpu";
    if (device == "cuda-emulated") {
      // The emulated GPU is the CPU's kernels: sizes for a test's seconds.
      go.emulate = true;
      go.name = "emulated-gpu";
      go.gemmSize = 256;
      go.repeats = 3;
      go.copyBytes = size_t(8) << 20;
      go.optimizerElements = int64_t(1) << 16;
      go.batches = {1, 4};
      go.runsPerNode = 2;
      go.passes = 2;
    }
    return calibrate::calibrateGpu(go);
  });
  if (!p) {
    std::cout << nlohmann::json{{"error", p.status().message()}}.dump() << "\n";
    return 1;
  }
  std::cout << partitioner::profileToJson(*p).dump() << "\n";
  return 0;
}
