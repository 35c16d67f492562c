#!/usr/bin/env bash
# tools/gpu-bundle.sh BUILD_DIR BUNDLE_DIR
#
# Packs what tools/gpu-check.sh needs to run the GPU checks on a machine
# that has a GPU, its driver and CUDA 13's cuBLAS but none of this
# project's Debian packages: CudaKernelTest, pipec, piperun and
# pipec-samples from BUILD_DIR (the default build runs on any x86-64 CPU
# with AVX2; not a -DPIPEC_NATIVE=ON one, unless the GPU machine's
# processor is this one's), the samples the build generated, two torch exports, and every
# shared library they load except glibc's and the CUDA libraries, which
# come from that machine.
# BUNDLE_DIR gets bundle.tar.xz, gpu-check.sh, gpu-env.sh and run-gpu.sh
# (bench/run-gpu.sh: the GPU benchmark).
set -euo pipefail
build=${1:?usage: gpu-bundle.sh BUILD_DIR BUNDLE_DIR}
out=${2:?usage: gpu-bundle.sh BUILD_DIR BUNDLE_DIR}
here=$(cd "$(dirname "$0")" && pwd)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$stage/fallback" "$stage/samples" "$stage/models" "$out"

bins=(CudaKernelTest pipec piperun pipec-samples pipec-calibrate-gpu)
for b in "${bins[@]}"; do
  [ -x "$build/bin/$b" ] || { echo "gpu-bundle: $build/bin/$b is missing (build it first)" >&2; exit 1; }
  strip --strip-unneeded -o "$stage/bin/$b" "$build/bin/$b"
done
cp "$build"/samples/*.onnx "$stage/samples/"
# Torch's exports of a bool-masked attention and a tanh GELU (the fused
# pipec:Attention and FusedGemm kernels on exported graphs), where torch is.
if /usr/bin/python3 -c "import torch" 2> /dev/null; then
  /usr/bin/python3 "$here/../tests/tools/fusion_models.py" "$stage/models" > /dev/null
fi

# Libraries: glibc's stay behind (the GPU machine's are newer); the C++
# runtime goes to fallback/, used only when that machine's is too old;
# cuBLAS, cuDNN and NCCL (hundreds of MB; cuDNN loads its sublibraries from
# its own directory) are that machine's, found by gpu-env.sh.
for lib in $(ldd "${bins[@]/#/$build/bin/}" | awk '/=>/ {print $3}' | sort -u); do
  name=$(basename "$lib")
  case "$name" in
    libc.so.*|libm.so.*|libdl.so.*|librt.so.*|libpthread.so.*|ld-linux*) ;;
    libcublas*|libcudart*|libcudnn*|libnccl*) ;;
    libstdc++.so.*|libgcc_s.so.*) cp -L "$lib" "$stage/fallback/$name" ;;
    *) cp -L "$lib" "$stage/lib/$name" ;;
  esac
done
tar -C "$stage" -cf - . | xz -T"$(nproc)" -9 > "$out/bundle.tar.xz"
cp "$here/gpu-check.sh" "$here/gpu-env.sh" "$here/../bench/run-gpu.sh" "$out/"
ls -la "$out"
