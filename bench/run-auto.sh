#!/usr/bin/env bash
# bench/run-auto.sh - pipec --auto against a measured grid: for each sample
# training model (GPT-like, CNN, MLP), 2 devices and a global batch of 32,
# the plan --auto chooses is measured next to every plan of the grid it
# searched: K in {1, 2}, micro-batch size b in {1, 2, 4, 8, 16, 32} (M =
# 32 / b), and on K=2 the schedules gpipe, 1f1b, zbh1, zbh2, zbv and
# interleaved (v=2, M even). Every plan runs ROUNDS times (default 3), all
# plans of a model one after the other in each round (interleaved), 20
# timed steps after 3 warm-up steps, one thread per device; a plan's figure
# is the median over rounds of its median step. The table: the chosen
# plan's measured step, the best grid plan's, their ratio (the target: at
# most 1.10), the chosen plan's rank among the grid's measured steps, and
# how long the search took.
# Usage: [ROUNDS=3] [MODELS="gpt-train cnn-train mlp-train"] bash bench/run-auto.sh [BUILD_DIR]
set -euo pipefail
BUILD=${1:-build}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
B=32
for model in ${MODELS:-gpt-train cnn-train mlp-train}; do
  onnx="$BUILD/samples/$model.onnx"
  "$BUILD/bin/pipec" "$onnx" --train --auto --devices 2 --global-batch $B -o "$OUT/$model-auto.plan" -q
  for b in 1 2 4 8 16 32; do
    m=$((B / b))
    "$BUILD/bin/pipec" "$onnx" --train -b $b -k 1 -m $m -o "$OUT/$model-k1-b$b.plan" -q
    for s in gpipe 1f1b zbh1 zbh2 zbv interleaved; do
      [ $s = interleaved ] && [ $((m % 2)) -ne 0 ] && continue
      "$BUILD/bin/pipec" "$onnx" --train -b $b -k 2 -m $m --schedule $s -o "$OUT/$model-k2-b$b-$s.plan" -q
    done
  done
done
for round in $(seq 1 ${ROUNDS:-3}); do
  for plan in "$OUT"/*.plan; do
    name=$(basename "$plan" .plan)
    "$BUILD/bin/piperun" "$plan" --steps 20 --warmup 3 --threads-per-device 1 --json \
      | /usr/bin/python3 -c "
import json, sys
j = json.load(sys.stdin)
print('$name', j['median_step_seconds'])" >> "$OUT/times.txt"
  done
done
/usr/bin/python3 - "$OUT" ${MODELS:-gpt-train cnn-train mlp-train} <<'PY'
import glob, json, os, statistics, sys
out = sys.argv[1]
steps = {}
for line in open(os.path.join(out, 'times.txt')):
    name, s = line.split()
    steps.setdefault(name, []).append(float(s))
med = {k: statistics.median(v) for k, v in steps.items()}
print(f"{'model':<10} {'chosen by --auto':<28} {'search':>8} {'chosen ms':>10} {'best grid plan':<22} {'best ms':>8} {'chosen/best':>11} {'rank':>9}")
for model in sys.argv[2:]:
    rep = json.load(open(os.path.join(out, f'{model}-auto.plan', 'report.json')))
    auto = rep['auto_plan']
    chosen = auto['best'][0]['label']
    grid = {k: v for k, v in med.items() if k.startswith(model + '-k')}
    best = min(grid, key=grid.get)
    a = med[model + '-auto']
    rank = 1 + sum(1 for v in grid.values() if v < a)
    print(f"{model:<10} {chosen:<28} {auto['search_seconds'] * 1e3:>6.0f}ms {a * 1e3:>10.3f} "
          f"{best[len(model) + 1:]:<22} {grid[best] * 1e3:>8.3f} {a / grid[best]:>11.3f} {rank:>4}/{len(grid)}")
print("steps: median over rounds of each run's median step")
PY
