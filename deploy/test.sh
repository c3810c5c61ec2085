#!/usr/bin/env bash
# Installs dependencies, builds, and runs the whole test suite:
#   1. every ctest test of the Release build (unit + integration);
#   2. the unit tests again under AddressSanitizer + UndefinedBehaviorSanitizer (clang-14, -O1);
#   3. every libFuzzer target of that same build for FUZZ_SECONDS (15) each, JOBS at a time,
#      from its committed corpus (docs/FUZZING.md).
# Skip step 2 with MOE_SKIP_ASAN=1, step 3 with MOE_SKIP_FUZZ=1 (local iteration only; CI
# runs all three).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
JOBS=${JOBS:-$(nproc)}

deploy/setup.sh
echo "[test] ctest (Release)"
(cd build && ctest --output-on-failure -j "$JOBS")

if [ "${MOE_SKIP_ASAN:-0}" != 1 ]; then
  deploy/setup.sh --sanitize
  echo "[test] ctest -L unit (ASan+UBSan)"
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
      ctest --output-on-failure -L unit -j "$JOBS")
fi
if [ "${MOE_SKIP_FUZZ:-0}" != 1 ]; then
  [ "${MOE_SKIP_ASAN:-0}" != 1 ] || deploy/setup.sh --sanitize
  echo "[test] fuzzers (libFuzzer, ASan+UBSan), ${FUZZ_SECONDS:-15} s each, $JOBS at a time"
  tools/fuzz/run_fuzzers.sh --build build-asan --seconds "${FUZZ_SECONDS:-15}" --jobs "$JOBS"
fi
echo "[test] all tests passed"
