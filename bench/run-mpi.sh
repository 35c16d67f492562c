#!/usr/bin/env bash
# bench/run-mpi.sh - the same plans on threads of one piperun and on MPI
# ranks: the sample GPT-like model, mini-batch 32 (micro-batches of 2):
#   K=2 1F1B, M=16: two device threads   against   mpirun -np 2
#   D=1 K=1, M=16 (one device)           against   D=2 K=1, M=8: 2 ranks, and 2 threads
#   D=2 K=1, M=8 on 2 ranks              against   the same with --shard-optimizer (ZeRO-1)
# interleaved (every case once per round, ROUNDS rounds, default 5); each run
# times 30 steps after 3 warm-up steps and reports its median step (rank 0's
# under mpirun) and the largest peak memory of its devices; the table gives
# the median over rounds and the ratios.
# Then the message cost of the two transports (pipec-bench-transport).
# Usage: bash bench/run-mpi.sh [BUILD_DIR] [ROUNDS]
set -euo pipefail
BUILD=${1:-build}
ROUNDS=${2:-5}
MODEL=$BUILD/samples/gpt-train.onnx
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
P="$BUILD/bin/pipec"
"$P" "$MODEL" -b 2 -k 2 -m 16 --train -o "$OUT/k2.plan" -q
"$P" "$MODEL" -b 2 -k 1 -m 16 --train -o "$OUT/k1.plan" -q
"$P" "$MODEL" -b 2 -k 1 -m 8 --data-parallel 2 --train -o "$OUT/d2.plan" -q
"$P" "$MODEL" -b 2 -k 1 -m 8 --data-parallel 2 --shard-optimizer --train -o "$OUT/d2z.plan" -q
run() { # CASE LAUNCHER... : one run's median step and largest device peak, appended to times.txt
  local name=$1
  shift
  "$@" --steps 33 --warmup 3 --json 2>/dev/null |
    /usr/bin/python3 -c "import json,sys; j = json.load(sys.stdin); print('$name', j['median_step_seconds'], max(d['peak_memory_bytes'] for d in j['devices']))" >> "$OUT/times.txt"
}
for r in $(seq "$ROUNDS"); do
  run k2-threads "$BUILD/bin/piperun" "$OUT/k2.plan"
  run k2-mpi mpirun -np 2 "$BUILD/bin/piperun" "$OUT/k2.plan"
  run d1 "$BUILD/bin/piperun" "$OUT/k1.plan"
  run d2-mpi mpirun -np 2 "$BUILD/bin/piperun" "$OUT/d2.plan"
  run d2-threads "$BUILD/bin/piperun" "$OUT/d2.plan"
  run d2z-mpi mpirun -np 2 "$BUILD/bin/piperun" "$OUT/d2z.plan"
  echo "round $r of $ROUNDS done" >&2
done
/usr/bin/python3 - "$OUT/times.txt" <<'PY'
import sys, statistics
t, peak = {}, {}
for line in open(sys.argv[1]):
    k, v, mem = line.split()
    t.setdefault(k, []).append(float(v))
    peak[k] = float(mem)
m = {k: statistics.median(v) for k, v in t.items()}
print("| case | median step (ms) | samples/s | largest device peak (MiB) | runs |")
print("| --- | --- | --- | --- | --- |")
for k in ("k2-threads", "k2-mpi", "d1", "d2-mpi", "d2-threads", "d2z-mpi"):
    print("| %s | %.3f | %.0f | %.2f | %d |" % (k, m[k] * 1e3, 32 / m[k], peak[k] / 2**20, len(t[k])))
print()
print("K=2 on 2 ranks / on 2 threads, throughput: %.3f" % (m["k2-threads"] / m["k2-mpi"]))
print("D=2 K=1 on 2 ranks / D=1 K=1, throughput: %.3f" % (m["d1"] / m["d2-mpi"]))
print("D=2 K=1 on 2 threads / D=1 K=1, throughput: %.3f" % (m["d1"] / m["d2-threads"]))
print("D=2 K=1 on 2 ranks, sharded optimizer / unsharded, throughput: %.3f, largest device peak: %.3f"
      % (m["d2-mpi"] / m["d2z-mpi"], peak["d2z-mpi"] / peak["d2-mpi"]))
PY
echo
"$BUILD/bin/pipec-bench-transport" --seconds 0.3
mpirun -np 2 "$BUILD/bin/pipec-bench-transport" --seconds 0.3
echo "(Open MPI's shared memory without the single-copy mechanism, as the tests run it:)"
mpirun --mca btl_vader_single_copy_mechanism none -np 2 "$BUILD/bin/pipec-bench-transport" --seconds 0.3
