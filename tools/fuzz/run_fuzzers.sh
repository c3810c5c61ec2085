#!/usr/bin/env bash
# Runs every libFuzzer target of build-fuzz/ (deploy/setup.sh --fuzz; --build build-asan for the
# sanitizer build, deploy/setup.sh --sanitize, as CI does) for a bounded time,
# starting from its committed corpus (fuzz/corpus/NAME, copied: the repository is not
# written), JOBS targets at a time, and prints one line per target: executions, edge
# coverage (cov), features (ft), corpus size. A crash, leak, timeout (10 s per input), OOM or
# sanitizer report fails the run; the input that did it is kept under OUT/NAME/artifacts/
# (add it to fuzz/corpus/NAME with the fix and its test).
#   tools/fuzz/run_fuzzers.sh [--seconds S] [--jobs J] [--build DIR] [--out DIR] [NAME...]
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
SECONDS_EACH=30
JOBS=$(nproc)
BUILD=$ROOT/build-fuzz
OUT=${TMPDIR:-/tmp}/moe-fuzz-$$
NAMES=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) SECONDS_EACH=$2; shift 2 ;;
    --jobs) JOBS=$2; shift 2 ;;
    --build) BUILD=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) NAMES+=("$1"); shift ;;
  esac
done
if [ ${#NAMES[@]} -eq 0 ]; then
  for d in "$ROOT"/fuzz/corpus/*/; do NAMES+=("$(basename "$d")"); done
fi
for name in "${NAMES[@]}"; do
  [ -x "$BUILD/fuzz/fuzz_$name" ] || { echo "run_fuzzers: $BUILD/fuzz/fuzz_$name is not built (deploy/setup.sh --fuzz or --sanitize)" >&2; exit 1; }
done
mkdir -p "$OUT"

# One target; writes OUT/NAME/summary (one line) and returns its status.
run_one() {
  local name=$1 bin=$BUILD/fuzz/fuzz_$1 work=$OUT/$1 rc
  rm -rf "$work"
  mkdir -p "$work/corpus" "$work/artifacts"
  cp "$ROOT/fuzz/corpus/$name"/* "$work/corpus/"
  local dict=()
  [ -f "$ROOT/fuzz/$name.dict" ] && dict=(-dict="$ROOT/fuzz/$name.dict")
  # fuzz/NAME.options: more libFuzzer flags for that target (e.g. -max_len), one line.
  local opts=()
  [ -f "$ROOT/fuzz/$name.options" ] && read -r -a opts <"$ROOT/fuzz/$name.options"
  set +e
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$bin" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$work/artifacts/" "${dict[@]}" "${opts[@]}" "$work/corpus" >"$work/log" 2>&1
  rc=$?
  set -e
  local execs last cov ft corp result=ok
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$work/log" | grep -o '[0-9]*$' || echo "?")
  last=$(grep -E '^#[0-9]+' "$work/log" | tail -1 || true)
  cov=$(echo "$last" | grep -o 'cov: [0-9]*' | grep -o '[0-9]*' || echo "?")
  ft=$(echo "$last" | grep -o 'ft: [0-9]*' | grep -o '[0-9]*' || echo "?")
  corp=$(echo "$last" | grep -o 'corp: [0-9]*' | grep -o '[0-9]*' || echo "?")
  if [ $rc -ne 0 ]; then
    result="FAILED (exit $rc): $(ls "$work/artifacts" | head -1) -- log $work/log"
    grep -E "ERROR|SUMMARY|runtime error" "$work/log" | head -5 >&2 || true
  fi
  printf "%-20s %10s %8s %8s %7s %s\n" "$name" "$execs" "$cov" "$ft" "$corp" "$result" >"$work/summary"
  return $rc
}

printf "%-20s %10s %8s %8s %7s %s\n" target execs cov ft corpus result
failed=0
running=0
for name in "${NAMES[@]}"; do
  if [ "$running" -ge "$JOBS" ]; then
    wait -n || failed=1
    running=$((running - 1))
  fi
  run_one "$name" &
  running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
  wait -n || failed=1
  running=$((running - 1))
done
for name in "${NAMES[@]}"; do cat "$OUT/$name/summary"; done
exit $failed
