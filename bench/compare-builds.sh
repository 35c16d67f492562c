#!/usr/bin/env bash
# bench/compare-builds.sh - the same training runs on two builds of pipec,
# interleaved (old, new, old, new...), to measure what a change did on this
# machine, whose speed drifts: the sample GPT-like model with its loss,
# mini-batch 32 (K=1 and K=2 1F1B at M = 1, 8 and 16), and the CNN and MLP
# samples at batch 32 on one device. Each build compiles its own plans with
# its own pipec (plan formats may differ); each run times 30 steps with
# piperun and reports its median step; the table gives the median over
# rounds and the median of the rounds' old/new ratios.
# Usage: bash bench/compare-builds.sh OLD_BUILD_DIR NEW_BUILD_DIR
set -euo pipefail
OLD=$1
NEW=$2
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
CASES="gpt:1:1 gpt:1:8 gpt:2:8 gpt:1:16 gpt:2:16 cnn:1:1 mlp:1:1"
for build in OLD NEW; do
  dir=${!build}
  for c in $CASES; do
    IFS=: read -r model k m <<< "$c"
    "$dir/bin/pipec" "$dir/samples/$model-train.onnx" -b $((32 / m)) -k "$k" -m "$m" --train \
      -o "$OUT/$build-$model-$k-$m.plan" -q
  done
done
for round in $(seq 1 "${ROUNDS:-5}"); do
  for c in $CASES; do
    IFS=: read -r model k m <<< "$c"
    for build in OLD NEW; do
      dir=${!build}
      "$dir/bin/piperun" "$OUT/$build-$model-$k-$m.plan" --steps 30 --threads-per-device 1 --json \
        | /usr/bin/python3 -c "import json,sys; print('$build $c', json.load(sys.stdin)['median_step_seconds'])" \
        >> "$OUT/times.txt"
    done
  done
done
/usr/bin/python3 - "$OUT/times.txt" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    build, case, t = line.split()
    rows.setdefault((build, case), []).append(float(t))
print(f"{'case (model:K:M)':18} {'old ms':>9} {'new ms':>9} {'old/new':>8}")
for case in dict.fromkeys(c for _, c in rows):
    old, new = rows[('OLD', case)], rows[('NEW', case)]
    ratio = statistics.median(o / n for o, n in zip(old, new))
    print(f"{case:18} {statistics.median(old)*1e3:9.3f} {statistics.median(new)*1e3:9.3f} {ratio:8.2f}")
PY
