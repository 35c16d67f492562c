#!/usr/bin/env bash
# bench/run-train.sh - time one training step (forward, backward, Adam) of the
# sample MLP, GPT-like and CNN models at batch 32 and 128 on one and two threads.
# Cases run interleaved, three rounds; each run times 20 steps with piperun
# and reports its median step; the table shows the median over rounds.
# Usage: bash bench/run-train.sh [BUILD_DIR]
set -euo pipefail
BUILD=${1:-build}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
for m in mlp gpt cnn; do
  for b in 32 128; do
    "$BUILD/bin/pipec" "$BUILD/samples/$m-train.onnx" -b $b --train --optimizer adam -o "$OUT/$m-$b.plan" -q
  done
done
for round in 1 2 3; do
  for m in mlp gpt cnn; do
    for b in 32 128; do
      for t in 1 2; do
        "$BUILD/bin/piperun" "$OUT/$m-$b.plan" --steps 20 --threads-per-device $t --json \
          | /usr/bin/python3 -c "import json,sys; j=json.load(sys.stdin); print('$m $b $t', j['median_step_seconds'])" \
          >> "$OUT/times.txt"
      done
    done
  done
done
/usr/bin/python3 - "$OUT/times.txt" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    m, b, t, s = line.split()
    rows.setdefault((m, int(b), int(t)), []).append(float(s))
print(f"{'model':6} {'batch':>5} {'threads':>7} {'median step ms':>15} {'samples/s':>10} {'2-thread speed-up':>18}")
for (m, b, t), v in sorted(rows.items()):
    med = statistics.median(v)
    one = statistics.median(rows[(m, b, 1)])
    print(f"{m:6} {b:5d} {t:7d} {med * 1e3:15.3f} {b / med:10.1f} {one / med if t == 2 else 1.0:18.2f}")
PY
