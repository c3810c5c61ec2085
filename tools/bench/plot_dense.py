#!/usr/bin/env python3
"""Where the resident path of one decode token goes, by cached tokens (moe bench dense).

Reads JSON written by `moe bench dense --json` (one file per run, or the
docs/bench_data/bench_dense_*.json bundle with "runs_after" and the long-context runs) and draws one stacked bar
per context: the medians over runs of each component of the resident path (routed experts and their fetch are
excluded, as the bench excludes them), with the floor (resident bytes + attended KV over the memory read rate)
as a marker: at the bench's own probe and, if --mem-gbps is given, at that rate too.

    python3 tools/bench/plot_dense.py --bundle docs/bench_data/bench_dense_g5s8.json --mem-gbps 26.7 \
        --png docs/bench_dense.png
"""
import argparse
import json
import statistics

PARTS = [("attention", "attention: projections"), ("attention_core", "attention: core"),
         ("indexer", "DSA indexer"), ("dense_mlp", "dense MLP"), ("shared_expert", "shared expert"),
         ("router", "router"), ("lm_head", "LM head"), ("embed", "embedding"), ("other", "other")]


def rows_by_context(runs):
    out = {}
    for run in runs:
        for r in run["single"]:
            out.setdefault(r["cached"], []).append(r)
    return dict(sorted(out.items()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", help="docs/bench_data/bench_dense_*.json")
    ap.add_argument("--run", action="append", default=[], help="a moe bench dense --json output (repeatable)")
    ap.add_argument("--mem-gbps", type=float, default=0, help="also mark the floor at this memory read rate")
    ap.add_argument("--png", required=True)
    a = ap.parse_args()
    runs = [json.load(open(p)) for p in a.run]
    if a.bundle:
        b = json.load(open(a.bundle))
        runs += b.get("runs_after", [])
        # The long-context runs add the contexts the main runs lack (128K).
        have = {r["cached"] for run in runs for r in run["single"]}
        for run in b.get("long_context_after_indexer_change", []):
            extra = [r for r in run["single"] if r["cached"] not in have]
            if extra:
                runs.append({"single": extra})
    if not runs:
        ap.error("give --bundle or --run")
    ctx = rows_by_context(runs)

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{t // 1024}K" if t >= 1024 else str(t) for t in ctx]
    fig, ax = plt.subplots(figsize=(10, 4.5))
    bottom = [0.0] * len(ctx)
    for key, name in PARTS:
        vals = [statistics.median(r["breakdown_ms"].get(key, 0) for r in rs) for rs in ctx.values()]
        ax.bar(labels, vals, bottom=bottom, label=name)
        bottom = [b + v for b, v in zip(bottom, vals)]
    floors = [statistics.median(r["floor_ms"] for r in rs) for rs in ctx.values()]
    ax.plot(labels, floors, "k_", markersize=40, mew=2, label="floor at the bench's probe")
    if a.mem_gbps > 0:
        at = [statistics.median((r["resident_bytes"] + r["kv_bytes"]) / (a.mem_gbps * 1e9) * 1e3 for r in rs)
              for rs in ctx.values()]
        ax.plot(labels, at, "r_", markersize=40, mew=2, label=f"floor at {a.mem_gbps:g} GB/s")
    ax.set_xlabel("cached tokens")
    ax.set_ylabel("ms per decode token (resident path)")
    ax.set_title("GLM-5 8-layer slice, 1 sequence: where the resident path goes")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(a.png, dpi=110)
    for (t, rs), total, fl in zip(ctx.items(), bottom, floors):
        print(f"{t:>7} cached: {total:7.1f} ms stacked, floor {fl:6.1f} ms at the probe")


if __name__ == "__main__":
    main()
