#!/usr/bin/env bash
# tools/setup.sh - install pipec's dependencies from Debian packages and build
# it (Release) into ./build. Run as root on Debian 12. Idempotent.
#   bash tools/setup.sh            # install + configure + build + calibrate
#   PIPEC_BUILD_DIR=out bash tools/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${PIPEC_BUILD_DIR:-build}

PACKAGES=(
  build-essential cmake ninja-build pkg-config python3 python3-numpy
  libonnx-dev libonnx-testdata python3-onnx libprotobuf-dev protobuf-compiler
  libopenblas-openmp-dev libdnnl-dev
  libgtest-dev libgmock-dev llvm-14-dev llvm-14-tools
  libcli11-dev nlohmann-json3-dev
  python3-torch python3-torchvision
  clang-14 libclang-rt-14-dev libfuzzer-14-dev
  openmpi-bin libopenmpi-dev
)
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

cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$BUILD_DIR" -j "$(nproc)"

# Measure this machine (about 10 s) for the cost model's default profile
# (pipec --calibrate --install: ~/.config/pipec/profiles/this-cpu.json), so
# that predictions are of this machine, not of the one the checked-in
# partitioner/profiles/this-cpu.json was measured on. PIPEC_NO_CALIBRATE=1
# skips it.
if [ "${PIPEC_NO_CALIBRATE:-0}" != 1 ]; then
  "$BUILD_DIR/bin/pipec" --calibrate --install
fi
