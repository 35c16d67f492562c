#!/usr/bin/env bash
# tools/fuzz.sh - build pipec's libFuzzer targets (tests/fuzz, clang with
# ASan and UBSan) and run each for SECONDS, seeded from the repository:
#   onnx        the sample models and a few hundred of ONNX's node tests
#   ir          the IR text tests
#   plan        plan.pb of the sample models compiled by BUILD_DIR's pipec
#   npy         .npy files of every type pipec reads
#   checkpoint  a checkpoint of the sample MLP
# A finding (crash, leak, timeout over 10 s, more than 2 GB) fails the run;
# the reproducer is left in the working directory (crash-*, leak-*, ...).
# Prints each target's executions. With RUNS, a target stops after RUNS
# executions or SECONDS, whichever comes first (a campaign: SECONDS large).
# Usage: bash tools/fuzz.sh [SECONDS=60] [BUILD_DIR=build] [TARGETS="onnx ir plan npy checkpoint"] [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-60}
BUILD=${2:-build}
TARGETS=${3:-"onnx ir plan npy checkpoint"}
RUNS=${4:-}
runs_flag=()
[ -n "$RUNS" ] && runs_flag=(-runs="$RUNS")
FUZZ_BUILD=${PIPEC_FUZZ_BUILD_DIR:-build-fuzz}
WORK=${PIPEC_FUZZ_WORK:-$FUZZ_BUILD/work}

CC=clang-14 CXX=clang++-14 cmake -S . -B "$FUZZ_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DPIPEC_FUZZ=ON -DPIPEC_BUILD_TESTS=OFF -DPIPEC_PCH=OFF > /dev/null
cmake --build "$FUZZ_BUILD" --target pipec-fuzz > /dev/null

mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
FUZZ_BIN=$(cd "$FUZZ_BUILD/bin" && pwd)
seeds=$WORK/seeds
rm -rf "$seeds"
mkdir -p "$seeds"/{onnx,ir,plan,npy,checkpoint}
cp samples/*.onnx "$seeds/onnx/"
n=0
for m in /usr/share/libonnx-testdata/data/node/*/model.onnx; do
  [ -f "$m" ] || continue
  cp "$m" "$seeds/onnx/node-$n.onnx"
  n=$((n + 1))
  [ $n -ge 300 ] && break
done
find tests/lit -name '*.pir' -exec cp {} "$seeds/ir/" \;
for m in mlp gpt cnn; do
  "$BUILD/bin/pipec" "$BUILD/samples/$m-train.onnx" -b 2 -k 2 -m 2 --train -o "$WORK/$m.plan" -q
  cp "$WORK/$m.plan/plan.pb" "$seeds/plan/$m-train.pb"
  "$BUILD/bin/pipec" "samples/$m.onnx" -o "$WORK/$m-infer.plan" -q
  cp "$WORK/$m-infer.plan/plan.pb" "$seeds/plan/$m.pb"
done
/usr/bin/python3 - "$seeds/npy" <<'PY'
import sys, numpy as np
d = sys.argv[1]
for t in ("f4", "f8", "i8", "i4", "u1", "b1", "f2"):
    np.save(f"{d}/{t}.npy", np.arange(12).reshape(3, 4).astype(t))
np.save(f"{d}/scalar.npy", np.float32(1.5))
np.save(f"{d}/empty.npy", np.zeros((0, 3), np.float32))
PY
"$BUILD/bin/piperun" "$WORK/mlp.plan" --steps 1 --checkpoint "$WORK/ckpt" > /dev/null 2>&1
{ cat "$WORK/ckpt/manifest.json"; printf '\0'; cat "$WORK/ckpt/tensors.bin"; } > "$seeds/checkpoint/mlp"

status=0
for t in $TARGETS; do
  corpus=$WORK/corpus-$t
  mkdir -p "$corpus"
  log=$WORK/$t.log
  start=$(date +%s)
  if (cd "$WORK" && "$FUZZ_BIN/pipec-fuzz-$t" -max_total_time="$SECONDS_EACH" "${runs_flag[@]}" \
        -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 "$corpus" "$seeds/$t") > "$log" 2>&1; then
    result=ok
  else
    result=FINDING
    status=1
  fi
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  echo "fuzz $t: $result, $execs executions in $(( $(date +%s) - start )) s ($log)"
done
exit $status
