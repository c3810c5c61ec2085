#!/usr/bin/env bash
# The policy at the budgets a GLM-5 user has (2-10% of the experts cached; docs/BENCHMARKS.md,
# ## expertd, "Policy at 2-10%"): the synthetic GLM-5-shaped trace and the trained demo model's
# recorded traces (the two held-out ones and the three recorded by tools/bench/record_routing_traces.py
# on text it was not trained on), through `moe bench cache --json`; prints markdown rows.
# References per row: --near-future (our policy told the true routing of the next MoE layer, and of
# the whole next token), and on the synthetic trace the informed bound (told the generator's
# distribution; best of several decision rules).
# Usage: tools/bench/cache_small_table.sh [BUILD_DIR] [JSON_OUT]   (deterministic; ~15 min idle)
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
nf = {r["rows"]: r["gap_closed"] for r in k.get("near_future", [])}
rows = sorted(nf)
told = " / ".join(gap(nf[r]) for r in rows)
inf = gap(j["gap_closed_informed"]) if j["trace"] == "synthetic" else "-"
print("| %s | %s | %s | %s | %s | %s | %s | %s | %s / %s / %s | %s | %s |" % (
    label, blabel, pct(h["lru"]), pct(h["ours"]), pct(k["hit_rate"]["ours"]), pct(h["learned"]), pct(h["belady"]),
    pct(h["belady_no_bypass"]), gap(j["gap_closed"]), gap(k["gap_closed"]), gap(j["gap_closed_learned"]), told, inf))' "$1" "$2" "$plain" "$hinted"
}
echo "| trace | budget | LRU | ours (heat) | ours + look-ahead | learned | Belady | Belady, no bypass | gap closed: ours / + look-ahead / learned | told the next layer / next token | informed |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
E=$((19 * 1024 * 1024))
for s in "384 2%" "960 5%" "1920 10%"; do
  set -- $s
  row synthetic "$2 ($1 slots)" "--lookahead-accuracy 0.72 --near-future 1,75" --synthetic --tokens 2000 \
    --informed-weights 0,0.25,0.5,1,3 --budget $(($1 * E))
done
for t in glm_tiny_chat_docstrings glm_tiny_chat_chats glm_tiny_chat_pydoc_prose glm_tiny_chat_license_prose \
         glm_tiny_chat_pydoc_chats; do
  for b in "2 2%" "5 5%" "10 10%"; do
    set -- $b
    row "trained $t" "$2 ($1 of 96)" "--lookahead --near-future 1,3" --trace $R/$t.txt --budget $1 --expert-bytes 1
  done
done
write_rows_json
