#!/usr/bin/env bash
# bench/run-vs-ort.sh - pipec inference against ONNX Runtime (CPU) on the
# same ONNX files, 1 and 2 threads, interleaved rounds (bench/vs_ort.py says
# how): the GPT-like and MLP models of bench/ort_models.py (torch.onnx
# exports at opset 13, LayerNorm and GELU decomposed), the samples, and the
# zoo's resnet18, mobilenet_v2, densenet121, shufflenet_v2, vit and
# encoder_post_norm (eval exports).
# ONNX Runtime comes from the npm registry: onnxruntime-node ships its CPU
# libonnxruntime.so inside the package (installed once into ORT_DIR, its
# install script, which fetches GPU libraries, skipped).
# Usage: [ROUNDS=3] [THREADS=1,2] [MODELS=gpt-like,...] [ORT_DIR=~/.cache/pipec-ort]
#        bash bench/run-vs-ort.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
ORT_DIR=${ORT_DIR:-$HOME/.cache/pipec-ort}
ORT_VERSION=${ORT_VERSION:-1.30.0}
if [ ! -e "$ORT_DIR/node_modules/onnxruntime-node/package.json" ]; then
  command -v npm > /dev/null || { echo "run-vs-ort.sh: needs node and npm (apt-get install nodejs npm)" >&2; exit 1; }
  mkdir -p "$ORT_DIR"
  (cd "$ORT_DIR" && npm install --silent --ignore-scripts "onnxruntime-node@$ORT_VERSION")
fi
exec /usr/bin/python3 bench/vs_ort.py --build "$BUILD" --ort "$ORT_DIR/node_modules" \
  --rounds "${ROUNDS:-3}" --threads "${THREADS:-1,2}" ${MODELS:+--models "$MODELS"}
