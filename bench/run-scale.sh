#!/usr/bin/env bash
# bench/run-scale.sh - pipec's compile time and peak memory as models grow.
# GPT-like models of zero weights in sparse external data files (no disk,
# no generation: pipec-samples --zero-weights; seq 512, vocab 32000, heads
# 16, micro-batches of one sequence) and synthetic chains of Gemm+Relu
# (`pipec-samples mlp --layers N/2 --hidden 16`), each compiled once per
# row with `/usr/bin/time`; the table gives the wall time, the peak RSS and
# the plan directory's size. Every compile checksums the weights it refers
# to, so the first compile of a new data file also pays for reading it.
# Usage: bash bench/run-scale.sh [BUILD_DIR] [quick|full]
#   quick (default): d 1024 x 12/48/128 layers, d 2048 x 128 layers (GPipe's
#                    6.6 G parameters), d 4096 x 12 layers; chains of 10k and
#                    100k nodes; K 1-128, M 32 and 128
#   full:            also d 4096 x 48 and 128 layers (26 G parameters)
set -euo pipefail
BUILD=${1:-build}
MODE=${2:-quick}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
S="$BUILD/bin/pipec-samples"
P="$BUILD/bin/pipec"
printf '| model | params | nodes | mode | K | M | wall | peak RSS | plan dir |\n'
printf '| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n'
row() { # LABEL PARAMS MODEL MODE K M
  local label=$1 params=$2 model=$3 mode=$4 k=$5 m=$6 flags=()
  [ "$mode" = training ] && flags=(--train)
  rm -rf "$OUT/p.plan"
  if /usr/bin/time -f '%e %M' -o "$OUT/time" "$P" "$model" -b 1 -k "$k" -m "$m" "${flags[@]}" \
      --profile a100-sxm-80gb -o "$OUT/p.plan" -q > "$OUT/log" 2>&1; then
    read -r wall kb < "$OUT/time"
    printf '| %s | %s | %s | %s | %s | %s | %s s | %s MiB | %s |\n' "$label" "$params" \
      "$(nodes "$model")" "$mode" "$k" "$m" "$wall" "$((kb / 1024))" "$(du -sh "$OUT/p.plan" | cut -f1)"
  else
    printf '| %s | %s | %s | %s | %s | %s | failed: %s | | |\n' "$label" "$params" "$(nodes "$model")" \
      "$mode" "$k" "$m" "$(tail -1 "$OUT/log")"
  fi
}
nodes() { /usr/bin/python3 -c "import onnx,sys; print(len(onnx.load(sys.argv[1], load_external_data=False).graph.node))" "$1"; }
gpt() { # LAYERS DMODEL
  local f="$OUT/gpt-$1-$2.onnx"
  "$S" gpt --layers "$1" --dmodel "$2" --heads 16 --seq 512 --vocab 32000 --batch 1 --with-loss \
    --zero-weights -o "$f" | sed -E 's/.*: ([0-9,]+) parameters.*/\1/' > "$f.params"
  echo "$f"
}
models=("12 1024" "48 1024" "128 1024" "128 2048" "12 4096")
[ "$MODE" = full ] && models+=("48 4096" "128 4096")
for lm in "${models[@]}"; do
  set -- $lm
  f=$(gpt "$1" "$2")
  params=$(cat "$f.params")
  label="gpt d$2 x $1"
  row "$label" "$params" "$f" inference 8 32
  for k in 1 8 32 128; do
    [ "$k" -gt "$1" ] && continue
    row "$label" "$params" "$f" training "$k" 32
  done
  if [ "$1" -ge 128 ]; then
    row "$label" "$params" "$f" training 1 128
    row "$label" "$params" "$f" training 128 128
  fi
  rm -f "$f" "$f.data"
done
for n in 10000 100000; do
  f="$OUT/chain$n.onnx"
  "$S" mlp --layers $((n / 2)) --hidden 16 --in 16 --out 4 --with-loss -o "$f" -q
  row "chain $n" - "$f" inference 64 32
  for km in "1 128" "8 8" "8 32" "64 32" "128 128"; do
    set -- $km
    [ "$n" -eq 100000 ] && [ "$1" -le 8 ] && [ "$2" -ge 32 ] && continue
    row "chain $n" - "$f" training "$1" "$2"
  done
done
