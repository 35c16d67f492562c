#!/usr/bin/env bash
# tools/setup.sh - install pipec's dependencies from Debian packages and build
# it (Release) into ./build. Run as root on Debian 12. Idempotent.
#   bash tools/setup.sh         # what a user runs: install what pipec needs,
#                               # build pipec, piperun (with the CUDA
#                               # backend where there is a GPU) and the
#                               # samples, calibrate this machine
#   bash tools/setup.sh --all   # everything: also the test and benchmark
#                               # dependencies, the tests, the benchmarks
#   PIPEC_BUILD_DIR=out bash tools/setup.sh
#   PIPEC_WERROR=1: compiler warnings are errors (CI sets it)
#   PIPEC_NO_CALIBRATE=1: skip the calibration
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${PIPEC_BUILD_DIR:-build}
ALL=0
case "${1:-}" in
  "") ;;
  --all) ALL=1 ;;
  *) echo "setup: unknown option '$1' (--all builds and installs everything)" >&2; exit 1 ;;
esac

# What pipec and piperun need to build and run.
PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libonnx-dev libprotobuf-dev protobuf-compiler
  libopenblas-openmp-dev libdnnl-dev llvm-14-dev
  libcli11-dev nlohmann-json3-dev
  openmpi-bin libopenmpi-dev
)
# The tests and benchmarks: GoogleTest, FileCheck and lit, ONNX's own test
# data and checker, the reference frameworks, a headless browser for the
# partition report's HTML, the fuzzers' clang. A test whose package is
# missing fails (tests/CMakeLists.txt: PIPEC_TESTS_ALLOW_SKIPS).
if [ "$ALL" = 1 ]; then
  PACKAGES+=(
    python3 python3-numpy python3-onnx libonnx-testdata
    libgtest-dev libgmock-dev llvm-14-tools
    python3-torch python3-torchvision
    chromium
    clang-14 libclang-rt-14-dev libfuzzer-14-dev
  )
fi
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

werror=OFF
[ "${PIPEC_WERROR:-0}" = 1 ] && werror=ON
# The CUDA backend (where the toolkit is: cmake/PipecCuda.cmake) is built
# by --all, and by the user's build only where there is a GPU to run it.
cuda=ON
if [ "$ALL" = 0 ] && ! { command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q GPU; }; then
  cuda=OFF
fi
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPIPEC_CUDA=$cuda \
  -DPIPEC_BUILD_TESTS=$([ "$ALL" = 1 ] && echo ON || echo OFF) -DPIPEC_WERROR=$werror
if [ "$ALL" = 1 ]; then
  cmake --build "$BUILD_DIR" -j "$(nproc)"
else
  cmake --build "$BUILD_DIR" -j "$(nproc)" --target pipec piperun samples
fi

# Measure this machine (a short run: docs/partitioner.md) for the cost
# model's default profile (pipec --calibrate --install:
# ~/.config/pipec/profiles/this-cpu.json), so that predictions are of this
# machine, not of the one the checked-in partitioner/profiles/this-cpu.json
# was measured on. PIPEC_NO_CALIBRATE=1 skips it.
if [ "${PIPEC_NO_CALIBRATE:-0}" != 1 ]; then
  "$BUILD_DIR/bin/pipec" --calibrate --install
fi
