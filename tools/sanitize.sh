#!/usr/bin/env bash
# tools/sanitize.sh - build pipec with AddressSanitizer and UBSan
# (PIPEC_SANITIZE=ON, its own build directory) and run the test suite on
# it; any report fails the run (UBSan's findings are fatal, as ASan's).
# Usage: bash tools/sanitize.sh [BUILD_DIR=build-asan] [extra ctest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-asan}
shift || true
# -O2 -g1: -g1's line tables are enough for the reports' stack traces and
# compile faster than -g (docs/robustness.md); no NDEBUG, so assertions run
# too. Not -O1: GCC contracts a * b + c into FMA only from -O2
# (-fexpensive-optimizations), and the accuracy tests (erf, the zoo's
# gradients against float64) are set for the code a release build runs; at
# -O1 two of them fail their tolerance.
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g1" \
  -DPIPEC_SANITIZE=ON > /dev/null
cmake --build "$BUILD" -j "$(nproc)"
# halt_on_error: the first report ends the process (a failing test);
# detect_leaks: leaks count as findings too; allocator_may_return_null: an
# allocation the machine cannot give fails as it does without ASan
# (std::bad_alloc, which the tools turn into their one-line error).
export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=1:abort_on_error=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
ctest --test-dir "$BUILD" -j2 --output-on-failure "$@"
