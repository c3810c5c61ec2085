#!/usr/bin/env bash
# Regenerates the policy table of docs/BENCHMARKS.md (## expertd, "Policy"):
# every committed routing trace and the synthetic GLM-5-shaped one, at the
# budgets used there, through `moe bench cache --json`; prints markdown rows.
# Usage: tools/bench/cache_table.sh [BUILD_DIR] [JSON_OUT]   (~1.5 minutes; deterministic)
# JSON_OUT: also write every row's two `--json` results (plain, with hints) as
# a JSON array, for tools/bench/plot_cache.py (docs/cache_policy.png).
# "+ look-ahead": the same policy given router look-ahead hints, as expertd
# gets them with prefetch on: the recorded traces' own (the model's router
# one layer ahead, --lookahead), simulated ones 72% right for the synthetic
# traces (--lookahead-accuracy 0.72).
set -euo pipefail
source "$(dirname "$0")/cache_rows.sh"
row() {  # label budget-label hint-flags args...
  local plain hinted
  cache_pair "$@"
  python3 -c '
import json, sys
j = json.loads(sys.argv[3]); k = json.loads(sys.argv[4]); h = j["hit_rate"]; label, blabel = sys.argv[1], sys.argv[2]
pct = lambda x: "%.2f%%" % (100 * x)
gap = lambda x: "%.0f%%" % (100 * x)
extra = ""
if "gap_closed_informed" in j and j["trace"] == "synthetic":
    extra = ", informed " + gap(j["gap_closed_informed"]) + ", phase counts " + gap(j["gap_closed_phase_counts"])
print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s / %s / %s (static best %s%s) |" % (
    label, blabel, pct(h["lru"]), pct(j["static_best_hit_rate"]), pct(h["ours"]), pct(k["hit_rate"]["ours"]),
    pct(h["learned"]), pct(h["belady"]), pct(h["belady_no_bypass"]),
    gap(j["gap_closed"]), gap(k["gap_closed"]), gap(j["gap_closed_learned"]), gap(j["gap_closed_static_best"]), extra))' "$1" "$2" "$plain" "$hinted"
}
echo "| trace | budget | LRU | static best | ours (heat, default) | ours + look-ahead | learned | Belady | Belady, no bypass | gap closed: ours / + look-ahead / learned (bounds) |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
E=$((19 * 1024 * 1024))
for s in "1920 10%" "5760 30%" "9600 50%"; do
  set -- $s
  row synthetic "$2 ($1 slots)" "--lookahead-accuracy 0.72" --synthetic --tokens 2000 --budget $(($1 * E))
done
row "synthetic Zipf 1.1, keep 0.2" "10%" "--lookahead-accuracy 0.72" --synthetic --tokens 2000 --zipf 1.1 --keep 0.2 --budget $((1920 * E))
for t in tiny_expertd_doc tiny_architecture_doc tiny_anchors_doc; do
  for b in "6 19%" "10 31%" "16 50%"; do
    set -- $b
    row "recorded $t" "$2 ($1 of 32)" --lookahead --trace $R/$t.txt --budget $1 --expert-bytes 1
  done
done
for t in glm_tiny_chat_docstrings glm_tiny_chat_chats; do
  for b in "18 19%" "30 31%" "48 50%"; do
    set -- $b
    row "trained $t" "$2 ($1 of 96)" --lookahead --trace $R/$t.txt --budget $1 --expert-bytes 1
  done
done
write_rows_json
