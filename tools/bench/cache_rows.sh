# Sourced by tools/bench/cache_table.sh and cache_small_table.sh (one mechanism for both tables):
# BUILD_DIR / JSON_OUT from the caller's arguments, and `cache_pair`, which runs one row's
# `moe bench cache --json` without and with its hint flags and keeps both for JSON_OUT.
build=${1:-build}
json_out=${2:-}
moe="$build/tools/moe/moe"
rows_json=()
R=tests/data/expertstore/routing
cache_pair() {  # label budget-label hint-flags args...  -> sets $plain and $hinted
  local label=$1 blabel=$2 hint=$3
  shift 3
  plain=$("$moe" bench cache --json "$@")
  hinted=$("$moe" bench cache --json $hint "$@")
  if [[ -n $json_out ]]; then
    rows_json+=("{\"label\": \"$label\", \"budget\": \"$blabel\", \"plain\": $plain, \"hinted\": $hinted}")
  fi
}
write_rows_json() {  # the collected pairs as one JSON array, when JSON_OUT was given
  if [[ -n $json_out ]]; then
    (IFS=,; echo "[${rows_json[*]}]") | python3 -c 'import json, sys; json.dump(json.load(sys.stdin), sys.stdout, indent=1)' >"$json_out"
  fi
}
