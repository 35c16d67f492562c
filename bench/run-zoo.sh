#!/usr/bin/env bash
# bench/run-zoo.sh - one training step of every model of the zoo
# (tests/zoo/models.py) in pipec and in PyTorch eager, same threads,
# interleaved rounds; prints a Markdown table (bench/zoo_bench.py says how).
# Usage: [ROUNDS=3] [THREADS=2] [MODELS=resnet18,vit] bash bench/run-zoo.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
exec /usr/bin/python3 bench/zoo_bench.py --build "$BUILD" --rounds "${ROUNDS:-3}" \
  --threads "${THREADS:-2}" ${MODELS:+--models "$MODELS"}
