#!/usr/bin/env bash
# bench/run-pipeline.sh - pipelined training on this machine: the sample
# GPT-like model, mini-batch 32 in M micro-batches of 32/M, K=1 against K=2
# stages (one thread per device, 1F1B, GPipe, ZB-H1 and ZB-H2), M in {1,2,4,8,16}.
# A fifth case is K=2 1F1B balanced and predicted by the node times that
# piperun --profile-ops measured on the K=1 plan (pipec --op-times).
# Cases run interleaved (K=1, K=2 1f1b, gpipe, zbh1, zbh2, measured, then again),
# ROUNDS rounds (default 5);
# each run times 30 steps after 3 warm-up steps with piperun and reports its
# median step; the table shows the median over rounds, the speed-up of K=2
# over K=1 against the ideal 2M/(M+1), and the runtime's own cost per
# instruction (and per kernel) measured on K=1: (mean step - kernel time -
# optimizer) / instructions (kernels), all averaged over the same steps.
# A control in every round: two K=1 runs at once, one pinned to each core;
# "2-core x" is their step over the K=1 step alone (1.00: both cores run
# at full speed together; the machine's share of a pipeline's loss), and
# "core1/core0" is the one on core 1 over the one on core 0. "cores ideal"
# is the ideal for the two cores as fast as they ran in the control: the
# K=1 step alone over each concurrent run's, added, times M/(M+1) (the
# ideal 2M/(M+1) when both keep full speed together), and "best/cores id."
# the best K=2 speed-up over it (each a median over rounds of the round's
# figure): how near the pipeline came to what the machine allowed.
# Usage: bash bench/run-pipeline.sh [BUILD_DIR] [MODEL]
set -euo pipefail
BUILD=${1:-build}
MODEL=${2:-$BUILD/samples/gpt-train.onnx}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
MS="1 2 4 8 16"
for m in $MS; do
  b=$((32 / m))
  "$BUILD/bin/pipec" "$MODEL" -b $b -k 1 -m $m --train -o "$OUT/k1-$m.plan" -q
  "$BUILD/bin/pipec" "$MODEL" -b $b -k 2 -m $m --train --schedule 1f1b -o "$OUT/k2-1f1b-$m.plan" -q
  "$BUILD/bin/pipec" "$MODEL" -b $b -k 2 -m $m --train --schedule gpipe -o "$OUT/k2-gpipe-$m.plan" -q
  "$BUILD/bin/pipec" "$MODEL" -b $b -k 2 -m $m --train --schedule zbh1 -o "$OUT/k2-zbh1-$m.plan" -q
  "$BUILD/bin/pipec" "$MODEL" -b $b -k 2 -m $m --train --schedule zbh2 -o "$OUT/k2-zbh2-$m.plan" -q
  # Balanced (and predicted) by the node times measured on one device.
  "$BUILD/bin/piperun" "$OUT/k1-$m.plan" --steps 10 --warmup 3 --profile-ops "$OUT/ops-$m.json" --json > /dev/null
  "$BUILD/bin/pipec" "$MODEL" -b $b -k 2 -m $m --train --schedule 1f1b --op-times "$OUT/ops-$m.json" \
    -o "$OUT/k2-meas-$m.plan" -q
done
measure() { # CASE M: one run's median step and its figures, appended to times.txt
  /usr/bin/python3 -c "
import json, sys
j = json.load(sys.stdin)
d = j['devices']
busy = sum(x['busy_seconds_per_step'] + x['optimizer_seconds_per_step'] for x in d)
ins = sum(x['instructions'] for x in d) / j['steps']
nodes = sum(x['nodes_run'] for x in d) / j['steps']
print('$1', $2, j['median_step_seconds'], j['predicted_step_seconds'], j['mean_step_seconds'] - busy, ins, nodes)" >> "$OUT/times.txt"
}
for round in $(seq 1 ${ROUNDS:-5}); do
  for m in $MS; do
    # Control: two K=1 runs at once, one per core. What they lose against
    # one alone is what this machine loses when both cores compute; the
    # pipeline cannot beat the ideal by less.
    taskset -c 0 "$BUILD/bin/piperun" "$OUT/k1-$m.plan" --steps 30 --warmup 3 --json > "$OUT/c0.json" &
    taskset -c 1 "$BUILD/bin/piperun" "$OUT/k1-$m.plan" --steps 30 --warmup 3 --json > "$OUT/c1.json"
    wait
    for f in c0 c1; do measure k1x2 $m < "$OUT/$f.json"; done
    for c in k1 k2-1f1b k2-gpipe k2-zbh1 k2-zbh2 k2-meas; do
      "$BUILD/bin/piperun" "$OUT/$c-$m.plan" --steps 30 --warmup 3 --threads-per-device 1 --json \
        | measure $c $m
    done
  done
done
/usr/bin/python3 - "$OUT/times.txt" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    c, m, step, pred, rest, ins, nodes = line.split()
    rows.setdefault((c, int(m)), []).append((float(step), float(pred), float(rest), float(ins), float(nodes)))
med = lambda v, i: statistics.median(x[i] for x in v)
cases = ['k2-1f1b', 'k2-gpipe', 'k2-zbh1', 'k2-zbh2', 'k2-meas']
names = ['1f1b', 'gpipe', 'zbh1', 'zbh2', 'meas']
print(f"{'M':>3} {'K=1 ms':>8} " + " ".join(f"{n + ' ms':>9}" for n in names) + " " +
      " ".join(f"{n + ' x':>8}" for n in names) +
      f" {'ideal x':>8} {'best/ideal':>10} {'pred 1f1b':>10} {'pred zbh1':>10} {'pred zbh2':>10} {'pred meas':>10} {'K=1 us/instr':>12} {'K=1 us/kernel':>13} {'2-core x':>10} {'core1/core0':>11} {'cores ideal':>11} {'best/cores id.':>15}")
for m in sorted({m for _, m in rows}):
    k1 = rows[('k1', m)]
    ideal = 2 * m / (m + 1)
    over = med(k1, 2) / med(k1, 3) * 1e6
    overKernel = med(k1, 2) / med(k1, 4) * 1e6
    # Speed-ups as the median of each round's ratio (runs of one round are
    # seconds apart, so the machine's drift cancels).
    ratio = lambda v: statistics.median(k1[i][0] / v[i][0] for i in range(min(len(k1), len(v))))
    # Two-core slowdown of the round: the mean of the two concurrent K=1
    # runs over the K=1 run alone.
    def slowdown(m):
        both = rows[('k1x2', m)]
        return statistics.median((both[2 * i][0] + both[2 * i + 1][0]) / 2 / k1[i][0]
                                 for i in range(min(len(k1), len(both) // 2)))
    # The two concurrent runs against each other: core 1's step over core
    # 0's (the cores of this virtual machine need not be equally fast).
    def asymmetry(m):
        both = rows[('k1x2', m)]
        return statistics.median(both[2 * i + 1][0] / both[2 * i][0] for i in range(len(both) // 2))
    # What two devices at this moment's concurrent speeds allow: each
    # core's K=1 speed while both run (relative to the K=1 run alone), added
    # up, times the fill and drain's M/(M+1); 2M/(M+1) when both run at full
    # speed. The best K=2 speed-up of each round over it, median.
    def coreIdeal(m):
        both = rows[('k1x2', m)]
        n = min(len(k1), len(both) // 2)
        return [(k1[i][0] / both[2 * i][0] + k1[i][0] / both[2 * i + 1][0]) * m / (m + 1)
                for i in range(n)]
    def bestOverCoreIdeal(m):
        adj = coreIdeal(m)
        n = min([len(adj)] + [len(rows[(c, m)]) for c in cases])
        return statistics.median(max(k1[i][0] / rows[(c, m)][i][0] for c in cases) / adj[i]
                                 for i in range(n))
    ratios = [ratio(rows[(c, m)]) for c in cases]
    print(f"{m:3d} {med(k1, 0)*1e3:8.2f} " + " ".join(f"{med(rows[(c, m)], 0)*1e3:9.2f}" for c in cases) + " " +
          " ".join(f"{r:8.2f}" for r in ratios) +
          f" {ideal:8.2f} {max(ratios)/ideal:10.2f} {med(rows[('k2-1f1b', m)], 1)*1e3:10.2f}"
          f" {med(rows[('k2-zbh1', m)], 1)*1e3:10.2f} {med(rows[('k2-zbh2', m)], 1)*1e3:10.2f}"
          f" {med(rows[('k2-meas', m)], 1)*1e3:10.2f} {over:12.1f} {overKernel:13.2f}"
          f" {slowdown(m):10.2f} {asymmetry(m):11.2f} {statistics.median(coreIdeal(m)):11.2f}"
          f" {bestOverCoreIdeal(m):15.2f}")
PY
