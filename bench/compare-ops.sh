#!/usr/bin/env bash
# bench/compare-ops.sh - what a kernel change did to each op type, measured
# so that this machine's drift cancels: the sample GPT-like model with its
# loss on one device (mini-batch 32, M micro-batches), `piperun
# --profile-ops` on two builds in rounds ordered old/new, then new/old
# (A B B A), 30 timed steps after 3 warm-up steps each, one thread. For
# each op type the table gives its time per step on each build (median over
# rounds) and its new/old ratio, raw and over the round's drift (the median
# new/old of the op types above 1% of the step: most op types do not change
# in one change, so their median is the machine's speed between the two
# runs), both medians over rounds.
# Usage: bash bench/compare-ops.sh OLD_BUILD_DIR NEW_BUILD_DIR [M]
set -euo pipefail
OLD=$1
NEW=$2
M=${3:-16}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
for build in OLD NEW; do
  dir=${!build}
  "$dir/bin/pipec" "$NEW/samples/gpt-train.onnx" -b $((32 / M)) -k 1 -m "$M" --train \
    -o "$OUT/$build.plan" -q
done
ROUNDS=${ROUNDS:-6}
for round in $(seq 1 "$ROUNDS"); do
  if [ $((round % 2)) = 1 ]; then order="OLD NEW"; else order="NEW OLD"; fi
  for build in $order; do
    dir=${!build}
    "$dir/bin/piperun" "$OUT/$build.plan" --steps 30 --warmup 3 --threads-per-device 1 \
      --profile-ops "$OUT/$build-$round.json" > /dev/null
  done
done
/usr/bin/python3 - "$OUT" "$ROUNDS" <<'PY'
import collections, json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def load(build):  # per round: op type -> seconds per step
    runs = []
    for r in range(1, rounds + 1):
        t = collections.defaultdict(float)
        for n in json.load(open(f"{out}/{build}-{r}.json"))["nodes"]:
            t[n["op"]] += n["seconds"]
        runs.append(t)
    return runs
old, new = load("OLD"), load("NEW")
ops = sorted(old[0], key=lambda o: -old[0][o])
# The machine's speed in each round pair: the median over op types (those
# above 1% of the step) of new/old. Most op types did not change, so this
# is the drift between the pair's two runs; an op type's change is its
# new/old over that, median over rounds.
big = [o for o in ops if old[0][o] > 0.01 * sum(old[0].values())]
drift = [statistics.median(n[o] / a[o] for o in big if a[o] > 0) for a, n in zip(old, new)]
print(f"{'op':<30} {'old ms':>8} {'new ms':>8} {'new/old':>8} {'vs drift':>9}")
med = lambda v: statistics.median(v)
for o in ops:
    ratios = [n.get(o, 0.0) / a[o] for a, n in zip(old, new) if a.get(o, 0.0) > 0]
    rel = [n.get(o, 0.0) / a[o] / d for a, n, d in zip(old, new, drift) if a.get(o, 0.0) > 0]
    if not ratios:
        continue
    print(f"{o:<30} {med([t.get(o, 0.0) for t in old]) * 1e3:8.3f} "
          f"{med([t.get(o, 0.0) for t in new]) * 1e3:8.3f} {med(ratios):8.2f} {med(rel):9.2f}")
tot = lambda t: sum(t.values())
print(f"{'all nodes':<30} {med(list(map(tot, old))) * 1e3:8.3f} {med(list(map(tot, new))) * 1e3:8.3f} "
      f"{med([tot(n) / tot(a) for a, n in zip(old, new)]):8.2f} "
      f"{med([tot(n) / tot(a) / d for a, n, d in zip(old, new, drift)]):9.2f}")
print("drift (median op new/old) per round: " + " ".join(f"{d:.2f}" for d in drift))
PY
