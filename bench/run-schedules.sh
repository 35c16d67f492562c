#!/usr/bin/env bash
# bench/run-schedules.sh - the pipeline schedules against each other on this
# machine: the sample GPT-like model training, mini-batch 32 in M
# micro-batches of 32/M, K=2 devices (one thread each), M in {4, 8, 16}:
# 1f1b, interleaved 1F1B (v=2: four stages, two per device), ZB-V (two
# stages per device in a V), PipeDream-2BW (no flush between steps; its
# step is the steady state's, the time between two steps run back to back)
# and, for scale, K=1. Cases run interleaved (K=1, 1f1b, interleaved, zbv,
# 2bw, then again), ROUNDS rounds (default 5);
# each run times 30 steps after 3 warm-up steps and reports its median
# step. The table: the median over rounds of each case's step, each
# schedule's step over 1F1B's in the same round (median of the ratios;
# below 1 is faster), and the cost model's predicted step.
# Usage: bash bench/run-schedules.sh [BUILD_DIR] [MODEL]
set -euo pipefail
BUILD=${1:-build}
MODEL=${2:-$BUILD/samples/gpt-train.onnx}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
MS="4 8 16"
CASES="k1 1f1b interleaved zbv 2bw"
for m in $MS; do
  b=$((32 / m))
  "$BUILD/bin/pipec" "$MODEL" -b $b -k 1 -m $m --train -o "$OUT/k1-$m.plan" -q
  for s in 1f1b interleaved zbv 2bw; do
    "$BUILD/bin/pipec" "$MODEL" -b $b -k 2 -m $m --train --schedule $s -o "$OUT/$s-$m.plan" -q
  done
done
for round in $(seq 1 ${ROUNDS:-5}); do
  for m in $MS; do
    for c in $CASES; do
      "$BUILD/bin/piperun" "$OUT/$c-$m.plan" --steps 30 --warmup 3 --threads-per-device 1 --json \
        | /usr/bin/python3 -c "
import json, sys
j = json.load(sys.stdin)
print('$round', '$c', $m, j['median_step_seconds'], j['predicted_step_seconds'])" >> "$OUT/times.txt"
    done
  done
done
/usr/bin/python3 - "$OUT/times.txt" <<'PY'
import statistics, sys
step, pred = {}, {}
for line in open(sys.argv[1]):
    r, c, m, s, p = line.split()
    step[(int(r), c, int(m))] = float(s)
    pred.setdefault((c, int(m)), float(p))
rounds = sorted({k[0] for k in step})
cases = ['k1', '1f1b', 'interleaved', 'zbv', '2bw']
med = lambda c, m: statistics.median(step[(r, c, m)] for r in rounds)
ratio = lambda c, m: statistics.median(step[(r, c, m)] / step[(r, '1f1b', m)] for r in rounds)
print(f"{'M':>3} " + " ".join(f"{c + ' ms':>15}" for c in cases) + " " +
      " ".join(f"{c + '/1f1b':>17}" for c in ['interleaved', 'zbv', '2bw']) + " " +
      " ".join(f"{'pred ' + c:>17}" for c in cases))
for m in sorted({k[2] for k in step}):
    print(f"{m:>3} " + " ".join(f"{med(c, m) * 1e3:>15.2f}" for c in cases) + " " +
          " ".join(f"{ratio(c, m):>17.3f}" for c in ['interleaved', 'zbv', '2bw']) + " " +
          " ".join(f"{pred[(c, m)] * 1e3:>17.2f}" for c in cases))
print(f"{len(rounds)} rounds; step: median over rounds; ratio: median over rounds of the "
      "round's step over 1F1B's")
PY
