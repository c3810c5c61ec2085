#!/usr/bin/env bash
# The policy at the budgets a GLM-5 user has (2-10% of the experts cached; docs/BENCHMARKS.md,
# ## expertd, "Policy at 2-10%"): the synthetic GLM-5-shaped trace and the trained demo model's
# recorded traces (the two held-out ones, the three recorded by tools/bench/record_routing_traces.py
# on text chosen by rule, and the four on the held-out texts of tests/data/expertstore/routing/heldout/),
# through `moe bench cache --json`; prints markdown rows.
# References per row: --near-future (our policy told the true routing of the next MoE layer, and of
# the whole next token), and on the synthetic trace the informed bound (told the generator's
# distribution; best of several decision rules). BASE_MOE (optional): another build's moe, whose
# policy fills the "old policy" column (e.g. main before a change).
# Usage: tools/bench/cache_small_table.sh [BUILD_DIR] [JSON_OUT] [BASE_MOE]   (deterministic; ~8 min idle)
set -euo pipefail
source "$(dirname "$0")/cache_rows.sh"
base=${3:-}
row() {  # label budget-label hint-flags args...
  local plain hinted old=null label=$1 blabel=$2
  cache_pair "$@"
  shift 3
  if [[ -n $base ]]; then old=$("$base" bench cache --json --quick "$@"); fi
  python3 -c '
import json, sys
j = json.loads(sys.argv[3]); k = json.loads(sys.argv[4]); o = json.loads(sys.argv[5]); h = j["hit_rate"]
label, blabel = sys.argv[1], sys.argv[2]
pct = lambda x: "%.2f%%" % (100 * x)
gap = lambda x: "%.0f%%" % (100 * x)
nf = {r["rows"]: r["gap_closed"] for r in j.get("near_future", [])}
told = " / ".join(gap(nf[r]) for r in sorted(nf))
inf = gap(j["gap_closed_informed"]) if j["trace"] == "synthetic" else "-"
nb = h["belady_no_bypass"] - h["lru"]
vs_nb = gap((h["ours"] - h["lru"]) / nb) if nb > 0 else "-"
old = pct(o["hit_rate"]["ours"]) if o else "-"
old_gap = gap(o["gap_closed"]) if o else "-"
print("| %s | %s | %s | %s | %s | %s | %s | %s | %s / %s / %s | %s | %s | %s |" % (
    label, blabel, pct(h["lru"]), old, pct(h["ours"]), pct(k["hit_rate"]["ours"]), pct(h["belady"]),
    pct(h["belady_no_bypass"]), old_gap, gap(j["gap_closed"]), gap(k["gap_closed"]), vs_nb, told, inf))' \
    "$label" "$blabel" "$plain" "$hinted" "$old"
}
echo "| trace | budget | LRU | old policy | ours (heat) | ours + look-ahead | Belady | Belady, no bypass | gap closed: old / ours / + look-ahead | ours, share of the no-bypass gap | told the next layer / next token | informed |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
E=$((19 * 1024 * 1024))
for s in "384 2%" "960 5%" "1920 10%"; do
  set -- $s
  row synthetic "$2 ($1 slots)" "--lookahead-accuracy 0.72 --quick" --synthetic --tokens 2000 --near-future 1,75 \
    --informed-weights 0,0.25,0.5,1,3 --budget $(($1 * E))
done
for t in glm_tiny_chat_estuary_prose glm_tiny_chat_bakery_prose glm_tiny_chat_garden_chat glm_tiny_chat_travel_chat \
         glm_tiny_chat_docstrings glm_tiny_chat_chats glm_tiny_chat_pydoc_prose glm_tiny_chat_license_prose \
         glm_tiny_chat_pydoc_chats; do
  for b in "2 2%" "5 5%" "10 10%"; do
    set -- $b
    row "trained ${t#glm_tiny_chat_}" "$2 ($1 of 96)" "--lookahead --quick" --trace $R/$t.txt --budget $1 \
      --expert-bytes 1 --near-future 1,3
  done
done
write_rows_json
