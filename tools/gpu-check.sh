#!/usr/bin/env bash
# tools/gpu-check.sh BUNDLE_DIR OUT_DIR
#
# The GPU checks, on a machine with an NVIDIA GPU, from the bundle that
# tools/gpu-bundle.sh made (run it from the repository's root there):
#   1. gpu.CudaKernelTest: every CUDA kernel against the CPU kernel;
#   2. tests/lit/e2e/cuda.test's steps: the MLP and GPT-like samples trained
#      on the GPU at K=1 and K=2 (bitwise alike) and near the CPU run, the
#      MLP's and GPT's inference outputs near the CPU's, and so those of
#      torch's exports of an attention and a GELU; CUDA graphs (every
#      compute instruction replayed) against --no-cuda-graphs, bitwise,
#      and the receives' copy stream against --no-copy-stream, bitwise,
#      also with Dropout (a GPT-like model with --dropout 0.1: K=1 with
#      graphs, K=2 without, bitwise, near the CPU);
#   3. training throughput of a GPT-like model on the GPU and on the CPU;
#   4. compute-sanitizer's memcheck over the kernel test and a training run;
#   5. resident training (state on the GPU, the device update) against
#      --host-optimizer (state and optimizer on the host): byte-identical
#      models, for AdamW with clipping and Nesterov SGD, at K=1 and K=2, and
#      for a data-parallel plan (D=2 x K=2), its optimizer sharded or not;
#      TF32 runs at K=1 and K=2 byte-identical; a label and a token out of
#      range named as errors by the flags read at the step's end;
#   6. reduced precision: bf16 training on cuBLAS's bf16 products (K=1
#      and K=2 bitwise alike, near the CPU), fp16 training with loss
#      scaling recovering from an overflow by the rule;
#   7. two ranks under mpirun on the GPU(s), messages staged through host
#      memory over MPI, bitwise the threads' run (where mpirun exists), and
#      the sharded data-parallel plan on four;
#      with two GPUs or more the same over NCCL (--gpu-transport nccl),
#      and a sharded data-parallel plan (D=2 x K=1; D=2 x K=2 with four
#      GPUs) over NCCL too; with one,
#      NCCL's two ranks on one GPU refused by name;
#   8. the model zoo on the GPU (tests/zoo/zoo.py --device cuda, the models
#      of $GPU_ZOO_MODELS, opset 17; torch, torchvision and onnx for
#      python3 there): forward within 1e-4 of torch, one step's gradients
#      within twice torch float32's error against float64, K=4 and K=1
#      bitwise equal on the GPU.
# Logs go to OUT_DIR; the last line says how many checks failed.
#
# GPU_CHECK_DEVICE=cuda-emulated tries the script's plumbing (every pipec
# and piperun command line, the comparisons, the MPI and NCCL steps) on a
# machine without a GPU, on the emulated GPU (docs/cuda.md, "The emulated
# GPU"): CudaKernelTest skips its GPU cases, memcheck is skipped, and each
# rank is a GPU of its own, so the NCCL steps run over the emulated link.
# Its timings say nothing of a GPU.
set -uo pipefail
bundle=$(cd "${1:?usage: gpu-check.sh BUNDLE_DIR OUT_DIR}" && pwd)
out=${2:?usage: gpu-check.sh BUNDLE_DIR OUT_DIR}
# Unpacks the bundle into $root and points PATH and LD_LIBRARY_PATH at it.
source "$(dirname "$0")/gpu-env.sh"
device=${GPU_CHECK_DEVICE:-cuda}
case "$device" in
  cuda|cuda-emulated) ;;
  *) echo "gpu-check: GPU_CHECK_DEVICE is cuda or cuda-emulated, not '$device'"; exit 2 ;;
esac
failures=0
check() {  # check NAME COMMAND...: runs it, logs it, counts a failure
  local name=$1; shift
  local t0=$SECONDS
  if "$@" > "$out/$name.log" 2>&1; then
    echo "PASS $name ($((SECONDS - t0)) s)"
  else
    echo "FAIL $name ($((SECONDS - t0)) s, exit $?): last lines of $name.log:"
    tail -15 "$out/$name.log"
    failures=$((failures + 1))
  fi
}

check cuda-kernel-test timeout 300 CudaKernelTest --gtest_output=json:"$out/cuda-kernel-test.json"
grep -E "^\[ +(PASSED|FAILED|SKIPPED) +\]" "$out/cuda-kernel-test.log" | grep -v " ms)$" | head -20
# Fused elementwise programs run as PTX from LLVM's NVPTX back end
# (runtime/cpu/ElementwiseJit.h) unless that fails, which piperun and the
# test then say; the interpreter, PIPEC_NO_CODEGEN's path, is checked too.
check fused-ew-compiled bash -c "! grep -q 'interpreted on the GPU' '$out/cuda-kernel-test.log'"
check fused-ew-interpreted env PIPEC_NO_CODEGEN=1 timeout 120 CudaKernelTest --gtest_filter='CudaKernels.FusedElementwise*'

w=$(mktemp -d)
s="$root/samples"
close() { "${PYTHON:-python3}" tests/tools/mpi_check.py close "$@"; }
same_outputs() {  # same_outputs GPU_DIR CPU_DIR TOL: inference outputs
  "${PYTHON:-python3}" - "$@" <<'EOF'
import sys, numpy as n, os
a, b, tol = sys.argv[1], sys.argv[2], float(sys.argv[3])
for f in sorted(os.listdir(b)):
    x, y = n.load(os.path.join(a, f)), n.load(os.path.join(b, f))
    d = abs(x - y).max() / abs(y).max()
    print(f, "max rel", d)
    assert d < tol, f
EOF
}
check mlp-plans sh -c "pipec $s/mlp-train.onnx -b 8 -k 1 -m 4 --train --optimizer sgd:lr=0.05 -o $w/k1.plan -q &&
  pipec $s/mlp-train.onnx -b 8 -k 2 -m 4 --train --optimizer sgd:lr=0.05 -o $w/k2.plan -q"
check mlp-gpu-k1 timeout 120 piperun "$w/k1.plan" --device $device --steps 5 --save "$w/gpu-k1.onnx"
check mlp-gpu-k2 timeout 120 piperun "$w/k2.plan" --device $device --steps 5 --save "$w/gpu-k2.onnx"
check mlp-k1-equals-k2 cmp "$w/gpu-k1.onnx" "$w/gpu-k2.onnx"
check mlp-cpu timeout 120 piperun "$w/k1.plan" --steps 5 --save "$w/cpu.onnx"
check mlp-gpu-near-cpu close "$w/gpu-k1.onnx" "$w/cpu.onnx" 1e-4
check mlp-infer sh -c "pipec samples/mlp.onnx -k 2 -o $w/infer.plan -q &&
  timeout 120 piperun $w/infer.plan --device $device --outputs $w/gpu-out &&
  timeout 120 piperun $w/infer.plan --outputs $w/cpu-out"
check mlp-infer-near-cpu same_outputs "$w/gpu-out" "$w/cpu-out" 1e-5
check gpt-plans sh -c "pipec $s/gpt-train.onnx -b 4 -k 1 -m 2 --train --optimizer sgd:lr=0.05 -o $w/gpt-k1.plan -q &&
  pipec $s/gpt-train.onnx -b 4 -k 2 -m 2 --train --optimizer sgd:lr=0.05 -o $w/gpt-k2.plan -q"
check gpt-gpu-k1 timeout 120 piperun "$w/gpt-k1.plan" --device $device --steps 3 --save "$w/gpt-gpu-k1.onnx"
check gpt-gpu-k2 timeout 120 piperun "$w/gpt-k2.plan" --device $device --steps 3 --save "$w/gpt-gpu-k2.onnx"
check gpt-k1-equals-k2 cmp "$w/gpt-gpu-k1.onnx" "$w/gpt-gpu-k2.onnx"
check gpt-cpu timeout 120 piperun "$w/gpt-k1.plan" --steps 3 --save "$w/gpt-cpu.onnx"
check gpt-gpu-near-cpu close "$w/gpt-gpu-k1.onnx" "$w/gpt-cpu.onnx" 1e-3
check gpt-infer sh -c "pipec $s/gpt.onnx -b 4 -k 2 -o $w/gpt-infer.plan -q &&
  timeout 120 piperun $w/gpt-infer.plan --device $device --outputs $w/gpt-gpu-out &&
  timeout 120 piperun $w/gpt-infer.plan --outputs $w/gpt-cpu-out"
check gpt-infer-near-cpu same_outputs "$w/gpt-gpu-out" "$w/gpt-cpu-out" 1e-4
# CUDA graphs (on above): every compute instruction replayed as a
# recording, and the same bits with every kernel launched every step.
check gpt-graphs-replayed bash -c "timeout 120 piperun '$w/gpt-k2.plan' --device $device --steps 3 |
  grep -E 'host schedule: .* ([0-9]+) of \\1 compute instructions replayed as recordings'"
check gpt-no-graphs-k2 timeout 120 piperun "$w/gpt-k2.plan" --device $device --steps 3 --no-cuda-graphs --save "$w/gpt-gpu-k2-eager.onnx"
check gpt-graphs-equal-eager cmp "$w/gpt-gpu-k2.onnx" "$w/gpt-gpu-k2-eager.onnx"
check gpt-infer-no-graphs timeout 120 piperun "$w/gpt-infer.plan" --device $device --no-cuda-graphs --outputs "$w/gpt-gpu-out-eager"
check gpt-infer-graphs-equal-eager diff -r "$w/gpt-gpu-out" "$w/gpt-gpu-out-eager"
# Receives on the copy stream (on above) against the compute stream: the
# same bits, and the host schedule says where they copied.
check gpt-copy-stream-said bash -c "timeout 120 piperun '$w/gpt-k2.plan' --device $device --steps 1 |
  grep -E 'host schedule: .* receives copied on the copy stream'"
check gpt-no-copy-stream-k2 timeout 120 piperun "$w/gpt-k2.plan" --device $device --steps 3 --no-copy-stream --save "$w/gpt-gpu-k2-nocopy.onnx"
check gpt-copy-stream-equal-off cmp "$w/gpt-gpu-k2.onnx" "$w/gpt-gpu-k2-nocopy.onnx"
# Dropout in recorded instructions: its step read from device memory, so
# each step draws its own masks (the CPU's): K=1 with graphs, K=2 without,
# and the CPU, the same training.
check gptd-plans sh -c "pipec-samples gpt --with-loss --dropout 0.1 -q -o $w/gptd.onnx &&
  pipec $w/gptd.onnx -b 4 -k 1 -m 2 --train --optimizer sgd:lr=0.05 -o $w/gptd-k1.plan -q &&
  pipec $w/gptd.onnx -b 4 -k 2 -m 2 --train --optimizer sgd:lr=0.05 -o $w/gptd-k2.plan -q"
check gptd-graphs-replayed bash -c "timeout 120 piperun '$w/gptd-k1.plan' --device $device --steps 3 --save '$w/gptd-k1.onnx' |
  grep -E 'host schedule: .* ([0-9]+) of \\1 compute instructions replayed as recordings'"
check gptd-k2-no-graphs timeout 120 piperun "$w/gptd-k2.plan" --device $device --steps 3 --no-cuda-graphs --save "$w/gptd-k2.onnx"
check gptd-k1-graphs-equal-k2-eager cmp "$w/gptd-k1.onnx" "$w/gptd-k2.onnx"
check gptd-cpu timeout 120 piperun "$w/gptd-k1.plan" --steps 3 --save "$w/gptd-cpu.onnx"
check gptd-gpu-near-cpu close "$w/gptd-k1.onnx" "$w/gptd-cpu.onnx" 1e-3
if [ -f "$root/models/x.npy" ]; then
  for m in attention gelu_tanh; do
    check "$m-export" sh -c "pipec $root/models/$m.onnx -o $w/$m.plan -q &&
      timeout 120 piperun $w/$m.plan --device $device --input x=$root/models/x.npy --outputs $w/$m-gpu &&
      timeout 120 piperun $w/$m.plan --input x=$root/models/x.npy --outputs $w/$m-cpu"
    check "$m-export-near-cpu" same_outputs "$w/$m-gpu" "$w/$m-cpu" 1e-5
  done
fi

# Resident training against the host's optimizer: the same bits (the device
# update is train::Optimizer's arithmetic), with clipping, at K=1 and K=2.
for opt in "adamw:lr=0.001,amsgrad=true --clip-grad-norm 0.5" "sgd:lr=0.05,momentum=0.9,nesterov=true"; do
  tag=$(echo "$opt" | cut -d: -f1)
  for k in 1 2; do
    check "gpt-$tag-k$k-plan" sh -c "pipec $s/gpt-train.onnx -b 4 -k $k -m 4 --train --optimizer $opt -o $w/gpt-$tag-k$k.plan -q"
    check "gpt-$tag-k$k-resident" timeout 120 piperun "$w/gpt-$tag-k$k.plan" --device $device --steps 4 --save "$w/gpt-$tag-k$k-res.onnx"
    check "gpt-$tag-k$k-host" timeout 120 piperun "$w/gpt-$tag-k$k.plan" --device $device --steps 4 --host-optimizer --save "$w/gpt-$tag-k$k-host.onnx"
    check "gpt-$tag-k$k-resident-equals-host" cmp "$w/gpt-$tag-k$k-res.onnx" "$w/gpt-$tag-k$k-host.onnx"
  done
  check "gpt-$tag-k1-equals-k2" cmp "$w/gpt-$tag-k1-res.onnx" "$w/gpt-$tag-k2-res.onnx"
done
# Data parallelism with the state on the GPU: D=2 x K=2 with AdamW, the
# optimizer sharded (ZeRO-1), clipping. The replicas' gradient sums and the
# updated weights go device to device; the same bits as the host optimizer
# (which sums the replicas on the host in the same order) and as the
# unsharded plan.
for z in "" "--shard-optimizer"; do
  tag=dp${z:+-zero}
  check "gpt-$tag-plan" sh -c "pipec $s/gpt-train.onnx -b 2 -k 2 -m 2 --data-parallel 2 $z --train \
    --optimizer adamw:lr=0.001 --clip-grad-norm 0.5 -o $w/gpt-$tag.plan -q"
  check "gpt-$tag-resident" timeout 120 piperun "$w/gpt-$tag.plan" --device $device --steps 4 --save "$w/gpt-$tag-res.onnx"
done
check gpt-dp-host timeout 120 piperun "$w/gpt-dp.plan" --device $device --steps 4 --host-optimizer --save "$w/gpt-dp-host.onnx"
check gpt-dp-resident-equals-host cmp "$w/gpt-dp-res.onnx" "$w/gpt-dp-host.onnx"
check gpt-dp-zero-equals-dp cmp "$w/gpt-dp-zero-res.onnx" "$w/gpt-dp-res.onnx"
# TF32 is the GPU's own: the emulated GPU computes exact fp32 and refuses it.
if [ "$device" = cuda ]; then
  check gpt-tf32-k1 timeout 120 piperun "$w/gpt-k1.plan" --device $device --math tf32 --steps 3 --save "$w/gpt-tf32-k1.onnx"
  check gpt-tf32-k2 timeout 120 piperun "$w/gpt-k2.plan" --device $device --math tf32 --steps 3 --save "$w/gpt-tf32-k2.onnx"
  check gpt-tf32-k1-equals-k2 cmp "$w/gpt-tf32-k1.onnx" "$w/gpt-tf32-k2.onnx"
  check gpt-tf32-near-exact close "$w/gpt-tf32-k1.onnx" "$w/gpt-gpu-k1.onnx" 5e-2
fi

# Data errors found on the GPU are reported at the step's end, naming the
# node: a label past the vocabulary, then a token past it (the GPT-like
# sample: 8 sequences of 16 tokens a step at -b 4 -m 2).
badrun() {  # badrun WHAT: expect piperun to fail naming an out-of-range index
  "${PYTHON:-python3}" - "$w/bad-$1" "$1" <<'EOF'
import numpy as n, os, sys
d, what = sys.argv[1], sys.argv[2]
os.makedirs(d, exist_ok=True)
r = n.random.default_rng(0)
tokens = r.integers(0, 64, size=(8, 16)).astype(n.int64)
labels = r.integers(0, 64, size=(8, 16)).astype(n.int64)
(labels if what == "label" else tokens)[3, 5] = 100000
n.save(os.path.join(d, "tokens.npy"), tokens)
n.save(os.path.join(d, "labels.npy"), labels)
EOF
  ! piperun "$w/gpt-k1.plan" --device $device --data "$w/bad-$1" --steps 1 > "$w/bad-$1.log" 2>&1 &&
    cat "$w/bad-$1.log" && grep -q "out of range" "$w/bad-$1.log"
}
check gpt-bad-label badrun label
check gpt-bad-token badrun token

# Throughput: a GPT-like model (4 blocks, d 256, seq 128, vocab 1024),
# batch 32 in 4 micro-batches, K=1, on the GPU and on this machine's CPU.
check gpt-speed-plan sh -c "pipec-samples gpt --layers 4 --dmodel 256 --heads 4 --seq 128 --vocab 1024 --with-loss -q -o $w/big.onnx &&
  pipec $w/big.onnx -b 32 -k 1 -m 4 --train -o $w/gpt-speed.plan -q"
check gpt-speed-gpu timeout 120 piperun "$w/gpt-speed.plan" --device $device --steps 20
check gpt-speed-cpu timeout 120 piperun "$w/gpt-speed.plan" --steps 5
for f in gpt-speed-gpu gpt-speed-cpu; do echo "== $f"; tail -12 "$out/$f.log"; done

# Memory errors: compute-sanitizer's memcheck over the kernel test and two
# training steps of the MLP at K=2, where the toolkit has it.
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null | head -1)
if [ "$device" = cuda-emulated ]; then
  echo "gpu-check: on the emulated GPU, memcheck skipped"
elif [ -n "$sanitizer" ]; then
  check memcheck-kernels timeout 240 "$sanitizer" --tool memcheck --error-exitcode 1 CudaKernelTest
  check memcheck-mlp-k2 timeout 120 "$sanitizer" --tool memcheck --error-exitcode 1 piperun "$w/k2.plan" --device $device --steps 2
  for f in memcheck-kernels memcheck-mlp-k2; do tail -n 3 "$out/$f.log"; done
else
  echo "gpu-check: no compute-sanitizer, memcheck skipped"
fi
# Reduced precision (docs/precision.md): bf16 products on cuBLAS
# (cublasGemmEx, bf16 operands, f32 results) at K=1 and K=2, bitwise alike
# and near the CPU's bf16 run; fp16 training with dynamic loss scaling from
# an overflowing scale (2^40, window 4) at K=1, state on the GPU: the
# rule's sequence (tests/tools/loss_scale_check.py) and near the CPU's run.
for k in 1 2; do
  check "gpt-bf16-k$k-plan" pipec "$s/gpt-train.onnx" -b 4 -k $k -m 4 --train --precision bf16 -o "$w/gpt-bf16-k$k.plan" -q
  check "gpt-bf16-k$k-gpu" timeout 120 piperun "$w/gpt-bf16-k$k.plan" --device $device --steps 6 --save "$w/gpt-bf16-k$k.onnx"
done
check gpt-bf16-k1-equals-k2 cmp "$w/gpt-bf16-k1.onnx" "$w/gpt-bf16-k2.onnx"
check gpt-bf16-cpu timeout 120 piperun "$w/gpt-bf16-k1.plan" --steps 6 --save "$w/gpt-bf16-cpu.onnx"
check gpt-bf16-near-cpu close "$w/gpt-bf16-k1.onnx" "$w/gpt-bf16-cpu.onnx" 1e-2
check gpt-fp16-plan pipec "$s/gpt-train.onnx" -b 4 -k 1 -m 4 --train --precision fp16 --loss-scale 1099511627776 \
  --loss-scale-window 4 -o "$w/gpt-fp16.plan" -q
check gpt-fp16-gpu timeout 120 piperun "$w/gpt-fp16.plan" --device $device --steps 40 --metrics "$w/gpt-fp16-gpu.jsonl" \
  --save "$w/gpt-fp16-gpu.onnx"
check gpt-fp16-rule "${PYTHON:-python3}" tests/tools/loss_scale_check.py "$w/gpt-fp16-gpu.jsonl" 1099511627776 4
check gpt-fp16-cpu timeout 120 piperun "$w/gpt-fp16.plan" --steps 40 --save "$w/gpt-fp16-cpu.onnx"
check gpt-fp16-near-cpu close "$w/gpt-fp16-gpu.onnx" "$w/gpt-fp16-cpu.onnx" 5e-2

# Two ranks on this machine's GPU(s) under mpirun, the messages staged
# through host memory over MPI (no NCCL yet): the trained model, losses and
# norms bitwise those of the threads' run on the GPU (state resident, the
# messages on the devices), at K=2.
if command -v mpirun > /dev/null; then
  check gpt-mpi-staged env PATH="$PATH" "${PYTHON:-python3}" tests/tools/mpi_check.py same "$w/gpt-k2.plan" 2 \
    "$w/mpi-staged" --device $device
  # The sharded data-parallel plan on 4 ranks, state on the GPUs: the
  # replicas' sums and weights through the host.
  check gpt-mpi-dp-zero env PATH="$PATH" "${PYTHON:-python3}" tests/tools/mpi_check.py same "$w/gpt-dp-zero.plan" 4 \
    "$w/mpi-dp-zero" --device $device
  check gpt-mpi-dp-zero-state-on-gpus grep "training state: threads device, ranks device" "$out/gpt-mpi-dp-zero.log"
  if [ "$device" = cuda-emulated ]; then
    gpus=4  # each rank emulates a GPU of its own
  else
    gpus=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU")
  fi
  if [ "${gpus:-0}" -ge 2 ]; then
    check gpt-mpi-nccl env PATH="$PATH" "${PYTHON:-python3}" tests/tools/mpi_check.py same "$w/gpt-k2.plan" 2 \
      "$w/mpi-nccl" --device $device --ranks-only --gpu-transport nccl
    # The replicas' gradient sums and weights over NCCL's replica channels:
    # D=2 x K=1 sharded on two GPUs, D=2 x K=2 on four.
    check gpt-dp-k1-plan sh -c "pipec $s/gpt-train.onnx -b 2 -k 1 -m 2 --data-parallel 2 --shard-optimizer --train \
      --optimizer adamw:lr=0.001 --clip-grad-norm 0.5 -o $w/gpt-dp-k1.plan -q"
    check gpt-mpi-nccl-dp-k1 env PATH="$PATH" "${PYTHON:-python3}" tests/tools/mpi_check.py same \
      "$w/gpt-dp-k1.plan" 2 "$w/mpi-nccl-dp-k1" --device $device --ranks-only --gpu-transport nccl
    if [ "$gpus" -ge 4 ]; then
      check gpt-mpi-nccl-dp-zero env PATH="$PATH" "${PYTHON:-python3}" tests/tools/mpi_check.py same \
        "$w/gpt-dp-zero.plan" 4 "$w/mpi-nccl-dp-zero" --device $device --ranks-only --gpu-transport nccl
    fi
  else
    check gpt-mpi-nccl-one-gpu-refused sh -c "! OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
      mpirun --oversubscribe -np 2 piperun '$w/gpt-k2.plan' --device $device --gpu-transport nccl --steps 1 2>&1 |
      grep 'NCCL cannot connect two ranks on one GPU'"
  fi
else
  echo "gpu-check: no mpirun on this machine: the host-staged MPI check skipped"
fi

# The zoo on the GPU, last: the slowest stage, and it needs torch.
if "${PYTHON:-python3}" -c "import torch, torchvision, onnx" 2>/dev/null; then
  zoo_default="resnet18 mobilenet_v2 vit encoder_pre_norm gpt2"
  [ "$device" = cuda-emulated ] && zoo_default=gpt2  # the plumbing, on this CPU
  for m in ${GPU_ZOO_MODELS:-$zoo_default}; do
    check "zoo-$m-gpu" timeout 240 env ZOO_TORCH_THREADS=8 "${PYTHON:-python3}" tests/zoo/zoo.py "$m" --opsets 17 \
      --bin "$root/bin" --device $device
    grep -E "^(PASS|FAIL)" "$out/zoo-$m-gpu.log" | cut -c1-160
  done
else
  echo "gpu-check: no torch/torchvision/onnx for ${PYTHON:-python3}, the zoo on the GPU skipped"
fi
echo "gpu-check: $failures check(s) failed"
exit $((failures > 0))
