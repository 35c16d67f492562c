#!/usr/bin/env bash
# bench/run-forward.sh - forward throughput of the sample MLP (8 x 1024x1024
# layers, batch 128) and a GPT-like model (batch 32) against the BLAS GEMM
# rate, measured interleaved in one run. Prints the table bench/results/log.md
# records. Usage: bash bench/run-forward.sh [BUILD_DIR]
set -euo pipefail
BUILD=${1:-build}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
"$BUILD/bin/pipec-samples" mlp --layers 8 --hidden 1024 --in 1024 --out 1024 -o "$OUT/mlp8x1024.onnx" -q
"$BUILD/bin/pipec-samples" gpt --layers 4 --dmodel 256 --heads 8 --seq 64 --vocab 1024 -o "$OUT/gpt4x256.onnx" -q
"$BUILD/bin/pipec-bench-forward" "$OUT/mlp8x1024.onnx:128" "$OUT/gpt4x256.onnx:32" --repeats 5 --threads 1,2
