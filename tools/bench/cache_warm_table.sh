#!/usr/bin/env bash
# Regenerates the warm-start table of docs/BENCHMARKS.md (## expertd,
# "Policy"): each recorded trace replayed cold and with the heat another
# recording of the same model left (`moe bench cache --warm-trace`: the
# policy restored from that replay's heat-file bytes, the cache empty, as
# expertd restarted with --heat-file), plus the trace's own heat (an upper
# reference: the same prompt served twice). Prints markdown rows.
# Usage: tools/bench/cache_warm_table.sh [BUILD_DIR]   (~20 s; deterministic)
set -euo pipefail
build=${1:-build}
moe="$build/tools/moe/moe"
R=tests/data/expertstore/routing
row() {  # trace warm-trace budget budget-label
  local j
  j=$("$moe" bench cache --json --trace $R/$1.txt --warm-trace $R/$2.txt --budget $3 --expert-bytes 1)
  python3 -c '
import json, sys
j = json.loads(sys.argv[1]); g = lambda x: "%.0f%%" % (100 * x)
print("| %s | %s | %s | %s / %s | %s / %s | %s |" % (sys.argv[2], sys.argv[3], sys.argv[4], g(j["gap_closed"]),
      g(j["gap_closed_warm"]), g(j["gap_closed_learned"]), g(j["gap_closed_learned_warm"]), g(j["gap_closed_static_best"])))' \
    "$j" "$1" "$2" "$4"
}
echo "| trace | warm from | budget | gap closed, heat: cold / warm | learned: cold / warm | static best |"
echo "| --- | --- | --- | --- | --- | --- |"
tiny="tiny_expertd_doc tiny_architecture_doc tiny_anchors_doc"
for t in $tiny; do
  for w in $tiny; do
    for b in "6 19%" "10 31%" "16 50%"; do
      set -- $b
      row $t $w $1 "$2"
    done
  done
done
for p in "glm_tiny_chat_docstrings glm_tiny_chat_chats" "glm_tiny_chat_chats glm_tiny_chat_docstrings" \
         "glm_tiny_chat_docstrings glm_tiny_chat_docstrings" "glm_tiny_chat_chats glm_tiny_chat_chats"; do
  set -- $p
  for b in "18 19%" "30 31%" "48 50%"; do
    set -- $1 $2 $b
    row $1 $2 $3 "$4"
  done
done
