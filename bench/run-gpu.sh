#!/usr/bin/env bash
# bench/run-gpu.sh BUNDLE_DIR OUT_DIR [STEPS]
#
# The GPU benchmark (docs/cuda.md, "Benchmark"), on a machine with an
# NVIDIA GPU, from the bundle tools/gpu-bundle.sh made (it copies this
# script there; run it from the repository's root):
#   - gpt-like: 4 blocks, d 256, 4 heads, seq 128, vocab 1024, batch 32 in
#     4 micro-batches;
#   - gpt2-small: 12 blocks, d 768, 12 heads, seq 1024, vocab 50257,
#     batch 8 in 4 micro-batches;
# each at K=1 and K=2 on the one GPU, in exact fp32, in TF32 (--math
# tf32) and in bf16 (pipec --precision bf16: the products on cuBLAS's bf16
# tensor cores with f32 results, run under --math tf32 so that cuBLAS may
# take tensor-op algorithms), and the GPT-like model with the state and optimizer on
# the host (--host-optimizer), the path before resident training, and
# without CUDA graphs (--no-cuda-graphs: the GPT-like model at K=1 and 2
# in exact fp32, gpt2-small at K=1 in TF32), and gpt2-small at K=2 in TF32
# with the receives copied on the compute stream (--no-copy-stream). Per run:
# the median step (piperun --json over STEPS steps after 3 warm-up
# steps), tokens/s, the achieved TFLOP/s of 6N + 12 L d s FLOPs per token
# (N: every trained parameter, embeddings included; the attention term of
# the PaLM paper's appendix B), and that as a fraction of the card's dense
# peak for the math used (NVIDIA's datasheet figures for H100 SXM and
# H200: 66.9 TFLOP/s fp32, 494.7 TFLOP/s TF32 dense, 989.4 TFLOP/s bf16
# dense). Where nsys is
# installed, a timeline of the GPT-like model's steps at K=1 goes to
# OUT_DIR/gpt-like.nsys-rep with its kernel summary.
#   - resnet50: torchvision's ResNet-50 (exported there by torch, training
#     mode: BatchNorm on batch statistics), batch 64 of 224x224 images,
#     training (SGD with momentum) and inference, exact and TF32: images/s,
#     and under nsys the share of the GPU time spent in convolution and
#     GEMM kernels (cuDNN's and cuBLAS's, by kernel name): that time is the
#     step's cuDNN-bound limit, and the share is the limit over the step.
# Every plan is compiled with the GPU's profile of its math (pipec
# --calibrate --device cuda, exact and --math tf32, written to OUT_DIR),
# so the table's predicted step, beside the measured one, is the cost
# model's for this GPU (target: within 15%).
# Results: OUT_DIR/results.json and a table on stdout.
#   - across GPUs, where the machine has two or more and mpirun: the
#     gpt2-small model at M=16 (micro-batches of 2) in TF32, on one GPU
#     (K=1) against K=2 on two, one rank per GPU with the stage messages
#     over NCCL (--gpu-transport nccl) and staged through the host, and as
#     two device threads of one process; and data parallelism, D=2 x K=1
#     (8 micro-batches a replica) over NCCL, its optimizer sharded. The
#     table's tokens/s over the one GPU's is the speedup (target: 1.9x for
#     K=2 over NCCL). Under nsys, the NCCL K=2 run's timeline (sends under
#     compute) goes to OUT_DIR/gpt2-small-2gpu.nsys-rep.
# RUN_GPU_DEVICE=cpu and RUN_GPU_MODELS=gpt-like try the script's plumbing
# on a machine without a GPU (from a build directory's bin/ on PATH:
# RUN_GPU_BUNDLE=none), without --math and --host-optimizer.
set -uo pipefail
bundle=${1:?usage: run-gpu.sh BUNDLE_DIR OUT_DIR [STEPS]}
[ "${RUN_GPU_BUNDLE:-}" = none ] || bundle=$(cd "$bundle" && pwd)
out=${2:?usage: run-gpu.sh BUNDLE_DIR OUT_DIR [STEPS]}
steps=${3:-20}
here=$(cd "$(dirname "$0")" && pwd)
device=${RUN_GPU_DEVICE:-cuda}
models=${RUN_GPU_MODELS:-gpt-like gpt2-small resnet50}
if [ "${RUN_GPU_BUNDLE:-}" = none ]; then
  mkdir -p "$out"
elif [ -f "$here/gpu-env.sh" ]; then # the bundle holds gpu-env.sh beside this script
  source "$here/gpu-env.sh"
else
  source "$here/../tools/gpu-env.sh"
fi
card=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
[ -n "$card" ] || card="no GPU ($device)"
w=$(mktemp -d)
results="$out/results.jsonl"
: > "$results"
nsys=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems*/bin/nsys 2>/dev/null | head -1)

# The GPU's profiles (pipec --calibrate --device cuda, exact and TF32):
# every plan is compiled with the one of its math, so that the report's
# predicted step is the GPU's; the table puts it beside the measured one.
profile_exact="" profile_tf32=""
if [ "$device" = cuda ]; then
  timeout 300 pipec --calibrate --device cuda -o "$out/this-gpu.json" > "$out/calibrate.log" 2>&1 &&
    profile_exact="$out/this-gpu.json" || { echo "run-gpu: the GPU calibration failed:"; tail -5 "$out/calibrate.log"; }
  timeout 300 pipec --calibrate --device cuda --math tf32 -o "$out/this-gpu-tf32.json" > "$out/calibrate-tf32.log" 2>&1 &&
    profile_tf32="$out/this-gpu-tf32.json" || { echo "run-gpu: the TF32 calibration failed:"; tail -5 "$out/calibrate-tf32.log"; }
fi

model() {  # model NAME LAYERS D HEADS SEQ VOCAB
  pipec-samples gpt --layers "$2" --dmodel "$3" --heads "$4" --seq "$5" --vocab "$6" --with-loss -q \
    -o "$w/$1.onnx"
}
# run() launches piperun through ${launch[@]} (mpirun for several ranks)
# and compiles with ${compile_extra[@]} (data parallelism), naming the
# plan with $tag.
launch=() compile_extra=() tag=""
run() {  # run NAME MODEL LAYERS D SEQ B M K MATH [piperun options...]; MATH exact, tf32 or bf16
  local name=$1 m=$2 layers=$3 d=$4 seq=$5 b=$6 mb=$7 k=$8 math=$9
  shift 9
  local plan="$w/$m-k$k-m$mb$tag.plan" precision=fp32 piperunMath=$math
  if [ "$math" = bf16 ]; then
    plan="$w/$m-k$k-m$mb$tag-bf16.plan" precision=bf16 piperunMath=tf32
  fi
  local profile=()
  if [ "$math" = exact ]; then
    [ -n "$profile_exact" ] && profile=(--profile "$profile_exact")
  else
    [ -n "$profile_tf32" ] && profile=(--profile "$profile_tf32")
  fi
  [ ${#profile[@]} -eq 0 ] || plan="${plan%.plan}-gpuprofile.plan"
  [ -d "$plan" ] || pipec "$w/$m.onnx" -b "$b" -k "$k" -m "$mb" --train --optimizer adamw:lr=0.0003 \
    "${compile_extra[@]}" "${profile[@]}" --precision "$precision" -o "$plan" -q ||
    { echo "run-gpu: $name: compile failed"; return; }
  local params
  params=$("${PYTHON:-python3}" -c "import json,sys; print(int(json.load(open(sys.argv[1]))['total_parameters']))" \
    "$plan/report.json")
  local extra=(--math "$piperunMath" "$@")
  [ "$device" = cuda ] || extra=()
  if ! timeout 300 "${launch[@]}" piperun "$plan" --device "$device" "${extra[@]}" --steps "$((steps + 3))" \
      --warmup 3 --json > "$out/$name.json" 2> "$out/$name.err"; then
    echo "run-gpu: $name failed:"; tail -5 "$out/$name.err"; return
  fi
  "${PYTHON:-python3}" - "$out/$name.json" "$name" "$card" "$params" "$layers" "$d" "$seq" "$b" "$mb" "$k" "$math" \
    "$plan/report.json" >> "$results" <<'EOF'
import json, sys
f, name, card, n, layers, d, seq, b, m, k, math, report = sys.argv[1:]
# Under mpirun the leader's JSON (the last object printed).
text = open(f).read()
r = json.loads(text[text.rindex('\n{') + 1:] if '\n{' in text else text)
n, layers, d, seq, b, m, k = map(int, (n, layers, d, seq, b, m, k))
replicas = max(1, int(json.load(open(report)).get("data_parallel", 1)))
tokens = b * m * seq * replicas
flops = tokens * (6 * n + 12 * layers * d * seq)
step = r["median_step_seconds"]
peak = {"exact": 66.9e12, "tf32": 494.7e12, "bf16": 989.4e12}[math] if ("H100" in card or "H200" in card) \
    else float("nan")
print(json.dumps({"run": name, "card": card, "K": k, "D": replicas, "math": math, "params": n, "tokens_per_step": tokens,
                  "step_ms": step * 1e3, "tokens_per_s": tokens / step, "tflops": flops / step / 1e12,
                  "peak_fraction": flops / step / peak, "training_state": r.get("training_state"),
                  "predicted_ms": (r.get("predicted_step_seconds") or float("nan")) * 1e3,
                  "loss": [r["first_loss"], r["last_loss"]]}))
EOF
}

case " $models " in *" gpt-like "*) model gpt-like 4 256 4 128 1024 ;; esac
case " $models " in *" gpt2-small "*) model gpt2-small 12 768 12 1024 50257 ;; esac
for k in 1 2; do
  for math in exact tf32 bf16; do
    [ -f "$w/gpt-like.onnx" ] && run "gpt-like-k$k-$math" gpt-like 4 256 128 8 4 "$k" "$math"
    [ -f "$w/gpt2-small.onnx" ] && run "gpt2-small-k$k-$math" gpt2-small 12 768 1024 2 4 "$k" "$math"
  done
done
[ -f "$w/gpt-like.onnx" ] && run gpt-like-k1-exact-host-optimizer gpt-like 4 256 128 8 4 1 exact --host-optimizer
# CUDA graphs on (the runs above) against off: every kernel launched
# every step.
for k in 1 2; do
  [ -f "$w/gpt-like.onnx" ] && run "gpt-like-k$k-exact-no-graphs" gpt-like 4 256 128 8 4 "$k" exact --no-cuda-graphs
done
[ -f "$w/gpt2-small.onnx" ] && run gpt2-small-k1-tf32-no-graphs gpt2-small 12 768 1024 2 4 1 tf32 --no-cuda-graphs
# The receives' copy stream (on above) against copies on the compute
# stream, at K=2 on one GPU.
[ -f "$w/gpt2-small.onnx" ] && run gpt2-small-k2-tf32-no-copy-stream gpt2-small 12 768 1024 2 4 2 tf32 --no-copy-stream

# Across GPUs (issue: K=2 over NCCL at 1.9x one GPU's throughput, sends
# under compute in the timeline).
gpus=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU")
if [ "$device" = cuda ] && [ "${gpus:-0}" -ge 2 ] && command -v mpirun > /dev/null && [ -f "$w/gpt2-small.onnx" ]; then
  mpi=(env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe --bind-to none -np 2)
  run gpt2-small-m16-1gpu gpt2-small 12 768 1024 2 16 1 tf32
  run gpt2-small-m16-k2-2gpu-threads gpt2-small 12 768 1024 2 16 2 tf32
  launch=("${mpi[@]}")
  run gpt2-small-m16-k2-2gpu-nccl gpt2-small 12 768 1024 2 16 2 tf32 --gpu-transport nccl
  run gpt2-small-m16-k2-2gpu-host gpt2-small 12 768 1024 2 16 2 tf32
  compile_extra=(--data-parallel 2 --shard-optimizer) tag=-d2z
  run gpt2-small-m8-d2z-2gpu-nccl gpt2-small 12 768 1024 2 8 1 tf32 --gpu-transport nccl
  launch=() compile_extra=() tag=""
  if [ -n "$nsys" ]; then
    timeout 240 "$nsys" profile -o "$out/gpt2-small-2gpu" --force-overwrite true --trace cuda,nvtx \
      "${mpi[@]}" piperun "$(ls -d "$w"/gpt2-small-k2-m16*.plan | grep -v bf16 | head -1)" --device cuda --math tf32 --gpu-transport nccl --steps 4 \
      > "$out/gpt2-small-2gpu.nsys.log" 2>&1 || echo "run-gpu: the two-GPU timeline failed (see gpt2-small-2gpu.nsys.log)"
  fi
else
  echo "run-gpu: fewer than two GPUs, or no mpirun: no runs across GPUs"
fi

if [ -n "$nsys" ] && [ "$device" = cuda ]; then
  timeout 240 "$nsys" profile -o "$out/gpt-like" --force-overwrite true --trace cuda \
    piperun "$(ls -d "$w"/gpt-like-k1-m4*.plan | grep -v bf16 | head -1)" --device cuda --steps 5 > "$out/nsys.log" 2>&1 &&
    "$nsys" stats --report cuda_gpu_kern_sum --format csv "$out/gpt-like.nsys-rep" > "$out/gpt-like-kernels.csv" 2>&1
  head -25 "$out/gpt-like-kernels.csv"
else
  echo "run-gpu: no nsys on this machine: no timeline"
fi

# ResNet-50: images/s, and the convolutions' and GEMMs' share of the GPU
# time under nsys.
cnn() {  # cnn NAME PLAN MATH IMAGES_PER_STEP [piperun options...]
  local name=$1 plan=$2 math=$3 images=$4
  shift 4
  local extra=(--math "$math" "$@")
  [ "$device" = cuda ] || extra=("$@")
  if ! timeout 300 piperun "$plan" --device "$device" "${extra[@]}" --json > "$out/$name.json" 2> "$out/$name.err"; then
    echo "run-gpu: $name failed:"; tail -5 "$out/$name.err"; return
  fi
  local kern=""
  if [ -n "$nsys" ] && [ "$device" = cuda ]; then
    timeout 240 "$nsys" profile -o "$out/$name" --force-overwrite true --trace cuda \
      piperun "$plan" --device cuda "${extra[@]}" > "$out/$name.nsys.log" 2>&1 &&
      "$nsys" stats --report cuda_gpu_kern_sum --format csv "$out/$name.nsys-rep" > "$out/$name-kernels.csv" 2>&1 &&
      kern="$out/$name-kernels.csv"
  fi
  "${PYTHON:-python3}" - "$out/$name.json" "$name" "$card" "$math" "$images" "$kern" >> "$results" <<'EOF'
import csv, json, re, sys
f, name, card, math, images, kern = sys.argv[1:]
r = json.load(open(f))
step = r.get("median_step_seconds") or r.get("median_seconds")
row = {"run": name, "card": card, "math": math, "step_ms": step * 1e3, "images_per_s": int(images) / step}
if kern:
    # nsys's kernel summary: total ns per kernel name over the profiled run.
    total = dense = 0.0
    for k in csv.DictReader(l for l in open(kern) if "," in l):
        t = float(k.get("Total Time (ns)", 0) or 0)
        total += t
        if re.search(r"conv|gemm|xmma|cutlass|implicit|fprop|dgrad|wgrad|sm90_|sm80_", k.get("Name", ""), re.I):
            dense += t
    row["conv_gemm_share"] = dense / total if total else float("nan")
print(json.dumps(row))
EOF
}
if case " $models " in *" resnet50 "*) true ;; *) false ;; esac; then
  if "${PYTHON:-python3}" - "$w" <<'EOF'
import inspect, os, sys, warnings
import torch, torchvision
w = sys.argv[1]
torch.manual_seed(0)
m = torchvision.models.resnet50()
legacy = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
for mode, fold in (("train", False), ("eval", True)):
    m.train(mode == "train")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(m, torch.randn(1, 3, 224, 224), os.path.join(w, f"resnet50-{mode}.onnx"), opset_version=17,
                          training=torch.onnx.TrainingMode.TRAINING if mode == "train" else torch.onnx.TrainingMode.EVAL,
                          input_names=["x"], output_names=["logits"],
                          dynamic_axes={"x": {0: "N"}, "logits": {0: "N"}}, do_constant_folding=fold, **legacy)
EOF
  then
    pipec "$w/resnet50-train.onnx" -b 64 -k 1 -m 1 --train --loss cross-entropy --logits logits \
      --optimizer sgd:lr=0.01,momentum=0.9 -o "$w/resnet50-train.plan" -q &&
      pipec "$w/resnet50-eval.onnx" -b 64 -k 1 -o "$w/resnet50-infer.plan" -q ||
      echo "run-gpu: resnet50: compile failed"
    for math in exact tf32; do
      [ -d "$w/resnet50-train.plan" ] && cnn "resnet50-train-$math" "$w/resnet50-train.plan" "$math" 64 \
        --steps "$((steps + 3))" --warmup 3
      [ -d "$w/resnet50-infer.plan" ] && cnn "resnet50-infer-$math" "$w/resnet50-infer.plan" "$math" 64 \
        --steps "$steps" --warmup 3
    done
  else
    echo "run-gpu: resnet50: no torch/torchvision to export it"
  fi
fi

"${PYTHON:-python3}" - "$results" "$out/results.json" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
json.dump(rows, open(sys.argv[2], "w"), indent=1)
cnn = [r for r in rows if "images_per_s" in r]
rows = [r for r in rows if "images_per_s" not in r]
print(f"{'run':38} {'card':24} {'ms/step':>9} {'predicted':>9} {'tokens/s':>10} {'TFLOP/s':>8} {'of peak':>8}")
for r in rows:
    print(f"{r['run']:38} {r['card'][:24]:24} {r['step_ms']:9.2f} {r.get('predicted_ms', float('nan')):9.2f} "
          f"{r['tokens_per_s']:10.0f} {r['tflops']:8.2f} {100 * r['peak_fraction']:7.1f}%")
one = next((r for r in rows if r['run'] == 'gpt2-small-m16-1gpu'), None)
if one:
    for r in rows:
        if r['run'].startswith('gpt2-small-m') and '2gpu' in r['run']:
            print(f"{r['run']}: {r['tokens_per_s'] / one['tokens_per_s']:.2f}x one GPU's tokens/s")
if cnn:
    print(f"\n{'run':38} {'card':24} {'ms/step':>9} {'images/s':>10} {'conv+GEMM share':>16}")
    for r in cnn:
        share = r.get("conv_gemm_share")
        print(f"{r['run']:38} {r['card'][:24]:24} {r['step_ms']:9.2f} {r['images_per_s']:10.1f} "
              f"{'-' if share is None else f'{100 * share:.1f}%':>16}")
EOF
