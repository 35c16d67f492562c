#!/usr/bin/env bash
# bench/compare-builds-models.sh - bench/ort_models.py's models (the
# GPT-like model, the MLP and the CNN, as torch exports them) on two builds
# of pipec, inference and training (MSE loss, Adam; K=1, M=1), one and two
# threads, interleaved (old, new, old, new...) over ROUNDS rounds, to
# measure what a change did on this machine, whose speed drifts.
# bench/compare-builds.sh does the same on the sample models. Each build
# compiles its own plans with its own pipec; each run reports piperun's
# median step; the table has every round's step and the median of the
# rounds' old/new ratios (above 1: the new build is faster).
# Usage: [ROUNDS=3] bash bench/compare-builds-models.sh OLD_BIN_DIR NEW_BIN_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=$1
NEW=$2
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
/usr/bin/python3 bench/ort_models.py "$OUT" > /dev/null
CASES="gpt-like:8 mlp-8x1024:128 cnn-like:32"
for build in OLD NEW; do
  dir=${!build}
  for c in $CASES; do
    IFS=: read -r model batch <<< "$c"
    "$dir/pipec" "$OUT/$model.onnx" -b "$batch" -q -o "$OUT/$build-$model-infer.plan"
    "$dir/pipec" "$OUT/$model.onnx" -b "$batch" --train --loss mse --logits y --optimizer adam -q \
      -o "$OUT/$build-$model-train.plan"
  done
done
for round in $(seq 1 "${ROUNDS:-3}"); do
  for c in $CASES; do
    model=${c%%:*}
    for kind in infer train; do
      for t in 1 2; do
        for build in OLD NEW; do
          dir=${!build}
          steps=20
          [ "$kind" = train ] && steps=12
          "$dir/piperun" "$OUT/$build-$model-$kind.plan" --steps "$steps" --warmup 3 --threads-per-device "$t" --json |
            /usr/bin/python3 -c "import json,sys; print('$build $model $kind $t', json.load(sys.stdin)['median_step_seconds'])" \
            >> "$OUT/times.txt"
        done
      done
    done
  done
done
/usr/bin/python3 - "$OUT/times.txt" <<'PY'
import collections, statistics, sys
t = collections.defaultdict(list)
for line in open(sys.argv[1]):
    build, model, kind, threads, s = line.split()
    t[(model, kind, threads, build)].append(float(s))
print('| model | run | threads | old ms (each round) | new ms (each round) | old / new (median of rounds) |')
print('| --- | --- | --- | --- | --- | --- |')
for (model, kind, threads, build) in sorted(t, key=lambda k: (k[0], k[1], k[2])):
    if build != 'OLD':
        continue
    o, n = t[(model, kind, threads, 'OLD')], t[(model, kind, threads, 'NEW')]
    r = statistics.median(a / b for a, b in zip(o, n))
    print(f'| {model} | {kind} | {threads} | {" ".join(f"{x * 1e3:.1f}" for x in o)} | '
          f'{" ".join(f"{x * 1e3:.1f}" for x in n)} | {r:.2f} |')
PY
