#!/usr/bin/env bash
# bench/run-vs-torch.sh - pipec training against PyTorch eager (Debian's
# python3-torch) on bench/ort_models.py's GPT-like and MLP models, 1 and 2
# threads, interleaved rounds, with the MLP's GEMM-bound limit
# (bench/vs_torch_train.py says how).
# Usage: [ROUNDS=3] bash bench/run-vs-torch.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
exec /usr/bin/python3 bench/vs_torch_train.py --build "${1:-build}" --rounds "${ROUNDS:-3}"
