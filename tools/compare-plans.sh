#!/usr/bin/env bash
# tools/compare-plans.sh - whether two builds of pipec emit byte-identical
# plans: each compiles the same models (the samples of SAMPLES_DIR, for
# inference and training, with several K, M, schedules and options) and
# every file of every plan directory must be equal, reports included. A
# refactoring that claims to change no behaviour shows it with this.
# Both builds read the checked-in device profiles, not this machine's
# calibration, so the result does not depend on when either last ran.
# Usage: bash tools/compare-plans.sh OLD_BIN_DIR NEW_BIN_DIR [SAMPLES_DIR]
#   (SAMPLES_DIR: the generated samples, default build/samples)
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 OLD_BIN_DIR NEW_BIN_DIR [SAMPLES_DIR]" >&2
  exit 2
fi
OLD=$1
NEW=$2
SAMPLES=${3:-build/samples}
for bin in "$OLD/pipec" "$NEW/pipec"; do
  [ -x "$bin" ] || { echo "compare-plans: $bin is not an executable" >&2; exit 2; }
done
for m in mlp gpt cnn mlp-train gpt-train cnn-train; do
  [ -f "$SAMPLES/$m.onnx" ] || { echo "compare-plans: $SAMPLES/$m.onnx not found (build the samples)" >&2; exit 2; }
done
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
export PIPEC_USER_PROFILE_DIR="$OUT/no-user-profiles"

# name|model|options
CASES=(
  "mlp-infer|mlp|-b 8"
  "gpt-infer-k2|gpt|-b 8 -k 2 -m 4"
  "cnn-infer|cnn|-b 8"
  "mlp-train-k2|mlp-train|-b 8 -k 2 -m 4 --train"
  "gpt-train-k2|gpt-train|-b 4 -k 2 -m 4 --train"
  "gpt-train-adam|gpt-train|-b 8 -m 4 --train --optimizer adam --lr 3e-3"
  "gpt-train-zbh2|gpt-train|-b 4 -k 2 -m 8 --train --schedule zbh2"
  "gpt-train-interleaved|gpt-train|-b 4 -k 2 -m 8 --train --schedule interleaved --virtual-stages 2"
  "gpt-train-2bw|gpt-train|-b 4 -k 2 -m 4 --train --schedule 2bw"
  "gpt-train-k4-remat|gpt-train|-b 4 -k 4 -m 8 --train --recompute full"
  "cnn-train-k2|cnn-train|-b 8 -k 2 -m 4 --train --optimizer sgd:lr=0.1,momentum=0.9"
)
status=0
for c in "${CASES[@]}"; do
  IFS='|' read -r name model opts <<< "$c"
  for side in OLD NEW; do
    dir=${!side}
    # shellcheck disable=SC2086
    if ! "$dir/pipec" "$SAMPLES/$model.onnx" $opts -q -o "$OUT/$side-$name.plan" 2> "$OUT/$side-$name.err"; then
      echo "$name: $side build failed: $(head -c 300 "$OUT/$side-$name.err")"
      status=1
      continue 2
    fi
  done
  if diff -rq "$OUT/OLD-$name.plan" "$OUT/NEW-$name.plan" > "$OUT/$name.diff"; then
    echo "$name: identical ($(cat "$OUT/NEW-$name.plan"/* | wc -c) bytes)"
  else
    echo "$name: DIFFERENT"
    sed 's/^/  /' "$OUT/$name.diff"
    status=1
  fi
done
[ $status = 0 ] && echo "compare-plans: every plan is byte-identical" || echo "compare-plans: plans differ"
exit $status
