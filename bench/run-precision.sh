#!/usr/bin/env bash
# bench/run-precision.sh - bf16 against fp32 training on this machine
# (docs/precision.md): the sample GPT-like and CNN models, micro-batches
# of 8, K=1,
#  - step time: 1f1b, M=4, on this machine's own path (oneDNN's bf16
#    matmul where the CPU has AVX512_BF16 or AMX) and capped to AVX2
#    (PIPEC_MAX_CPU_ISA=avx2: the emulation, operands widened to fp32);
#  - memory: the allocated arena under gpipe (every micro-batch's
#    activations alive at once) at M=4 and M=16, and from the two the
#    arena's growth per micro-batch (the activations one micro-batch keeps).
# Runs interleave fp32 and bf16 (A B A B), ROUNDS rounds (default 5); each
# times 20 steps after 3 warm-up steps. The table: medians over rounds,
# bf16 over fp32 as the median of the per-round ratios.
# Usage: bash bench/run-precision.sh [BUILD_DIR]
set -euo pipefail
BUILD=${1:-build}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
for model in gpt cnn; do
  for p in fp32 bf16; do
    "$BUILD/bin/pipec" "$BUILD/samples/$model-train.onnx" -b 8 -k 1 -m 4 --train --precision $p \
      -o "$OUT/$model-$p.plan" -q
    for m in 4 16; do
      "$BUILD/bin/pipec" "$BUILD/samples/$model-train.onnx" -b 8 -k 1 -m $m --schedule gpipe --train \
        --precision $p -o "$OUT/$model-$p-gpipe$m.plan" -q
    done
  done
done
row() { # round model isa precision plan
  local json
  if [ "$3" = avx2 ]; then
    json=$(PIPEC_MAX_CPU_ISA=avx2 "$BUILD/bin/piperun" "$5" --steps 20 --warmup 3 --json)
  else
    json=$("$BUILD/bin/piperun" "$5" --steps 20 --warmup 3 --json)
  fi
  echo "$json" | /usr/bin/python3 -c "
import json, sys
j = json.load(sys.stdin)
print('$1', '$2', '$3', '$4', j['median_step_seconds'], j['devices'][0]['arena_bytes'])" >> "$OUT/times.txt"
}
for round in $(seq 1 ${ROUNDS:-5}); do
  for model in gpt cnn; do
    for isa in native avx2; do
      for p in fp32 bf16; do
        row "$round" "$model" "$isa" "$p" "$OUT/$model-$p.plan"
      done
    done
  done
done
for model in gpt cnn; do
  for p in fp32 bf16; do
    for m in 4 16; do
      "$BUILD/bin/piperun" "$OUT/$model-$p-gpipe$m.plan" --steps 2 --json | /usr/bin/python3 -c "
import json, sys
print('$model', '$p', $m, json.load(sys.stdin)['devices'][0]['arena_bytes'])" >> "$OUT/arenas.txt"
    done
  done
done
/usr/bin/python3 - "$OUT/times.txt" "$OUT/arenas.txt" <<'PY'
import collections, statistics, sys
t = collections.defaultdict(dict)
arena1f1b = {}
for line in open(sys.argv[1]):
    r, model, isa, p, sec, arena = line.split()
    t[(model, isa)].setdefault(p, {})[r] = float(sec)
    arena1f1b[(model, p)] = int(arena)
print('step time, 1f1b M=4 (median of %d rounds)' % len(next(iter(t.values()))['fp32']))
print('| model | path | fp32 ms | bf16 ms | bf16 / fp32 |')
print('|---|---|---|---|---|')
for (model, isa), d in t.items():
    f, b = d['fp32'], d['bf16']
    ratio = statistics.median(b[r] / f[r] for r in f)
    print('| %s | %s | %.2f | %.2f | %.2f |' % (model, 'own (bf16 matmul where the CPU has one)' if isa == 'native'
          else 'capped to AVX2 (emulation)', 1e3 * statistics.median(f.values()),
          1e3 * statistics.median(b.values()), ratio))
a = {}
for line in open(sys.argv[2]):
    model, p, m, arena = line.split()
    a[(model, p, int(m))] = int(arena)
print()
print('allocated arena (bytes)')
print('| model | fp32 1f1b M=4 | bf16 | fp32 gpipe M=16 | bf16 | per micro-batch fp32 | bf16 |')
print('|---|---|---|---|---|---|---|')
for model in ('gpt', 'cnn'):
    per = {p: (a[(model, p, 16)] - a[(model, p, 4)]) / 12 for p in ('fp32', 'bf16')}
    print('| %s | %d | %d (%.0f%%) | %d | %d (%.1f%%) | %d | %d (%.1f%%) |' % (
        model, arena1f1b[(model, 'fp32')], arena1f1b[(model, 'bf16')],
        100 * arena1f1b[(model, 'bf16')] / arena1f1b[(model, 'fp32')],
        a[(model, 'fp32', 16)], a[(model, 'bf16', 16)], 100 * a[(model, 'bf16', 16)] / a[(model, 'fp32', 16)],
        per['fp32'], per['bf16'], 100 * per['bf16'] / per['fp32']))
PY
