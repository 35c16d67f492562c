# tools/gpu-env.sh: sourced by tools/gpu-check.sh and bench/run-gpu.sh on a
# GPU machine, with $bundle (the directory tools/gpu-bundle.sh filled) and
# $out (a log directory) set. Unpacks the bundle into $root, takes the CUDA
# runtime, cuBLAS, cuDNN 9 and NCCL 2 from this machine (the toolkit's, else
# the pip packages': nvidia-cudnn-cu13, nvidia-nccl-cu13), and puts the bundle's binaries
# and libraries on PATH and LD_LIBRARY_PATH; prints the GPU and the CPU.
mkdir -p "$out"
root=$(mktemp -d)
tar -C "$root" -xJf "$bundle/bundle.tar.xz" || { echo "gpu-env: cannot unpack the bundle"; exit 1; }
cudadirs=""
for want in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcudnn.so.9 libnccl.so.2; do
  found=$(ls /usr/local/cuda/lib64/$want /usr/local/cuda/targets/x86_64-linux/lib/$want 2>/dev/null | head -1)
  [ -n "$found" ] || found=$(find / -xdev -name "$want" 2>/dev/null | head -1)
  [ -n "$found" ] || { echo "gpu-env: no $want on this machine"; exit 1; }
  cudadirs="$cudadirs:$(dirname "$found")"
done
export LD_LIBRARY_PATH="$root/lib$cudadirs"
if ldd "$root/bin/piperun" 2>&1 | grep -q "not found"; then
  export LD_LIBRARY_PATH="$root/fallback:$LD_LIBRARY_PATH"
fi
ldd "$root/bin/piperun" "$root/bin/CudaKernelTest" > "$out/ldd.txt" 2>&1
if grep -q "not found" "$out/ldd.txt"; then
  echo "gpu-env: libraries missing:"; grep "not found" "$out/ldd.txt" | sort -u; exit 1
fi
export PATH="$root/bin:$PATH" PIPEC_USER_PROFILE_DIR=/nonexistent
nvidia-smi -L || echo "gpu-env: nvidia-smi failed"
grep -m1 "model name" /proc/cpuinfo
