#!/usr/bin/env python3
"""Plots the policy table (tools/bench/cache_table.sh BUILD JSON_OUT) into a PNG.

usage: python3 tools/bench/plot_cache.py docs/cache_policy.json [docs/cache_policy.png]
One row per trace x budget: the share of the LRU -> Belady gap our policy closes
(bar: with look-ahead hints, as expertd runs it; tick: without), the learned
order, and the references that say how much of the gap is reachable at all
(the best fixed placement in hindsight; on synthetic traces the policy told the
generator's distribution). Needs matplotlib (tools/bench/requirements-plot.txt);
hand-run, not a test.
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

LO = -10  # percent; the static placement's losses on the synthetic traces go far below


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("json")
    ap.add_argument("out", nargs="?", default="docs/cache_policy.png")
    args = ap.parse_args()
    with open(args.json) as f:
        rows = json.load(f)
    labels, ours, hinted, learned, static, informed = [], [], [], [], [], []
    for r in rows:
        p, h = r["plain"], r["hinted"]
        labels.append("%s, %s" % (r["label"].replace("recorded ", "").replace("trained ", ""), r["budget"]))
        ours.append(100 * p["gap_closed"])
        hinted.append(100 * h["gap_closed"])
        learned.append(100 * p["gap_closed_learned"])
        static.append(100 * p["gap_closed_static_best"])
        informed.append(100 * p["gap_closed_informed"] if p["trace"] == "synthetic" else None)
    y = list(range(len(rows)))[::-1]
    fig, ax = plt.subplots(figsize=(10, 0.42 * len(rows) + 1.6))
    ax.barh(y, hinted, height=0.6, color="#4c78a8", label="ours + look-ahead (expertd's default)")
    ax.scatter(ours, y, marker="|", s=220, color="black", label="ours, no hints", zorder=3)
    ax.scatter(learned, y, marker="x", color="#e45756", label="learned order (opt-in)", zorder=3)
    sx = [max(s, LO + 1) for s in static]
    ax.scatter(sx, y, marker="D", s=28, facecolors="none", edgecolors="#54a24b",
               label="best fixed placement in hindsight (clipped at %d%%)" % (LO + 1), zorder=3)
    iy = [yy for yy, v in zip(y, informed) if v is not None]
    ax.scatter([v for v in informed if v is not None], iy, marker="*", s=90, color="#f58518",
               label="told the generator's distribution (synthetic)", zorder=3)
    ax.axvline(50, color="gray", linestyle="--", linewidth=1)
    ax.text(50.5, y[0] + 0.6, "target: half the gap", color="gray", fontsize=8, va="bottom")
    ax.set_yticks(y)
    ax.set_yticklabels(labels, fontsize=8)
    ax.set_xlim(LO, 100)
    ax.set_ylim(-0.8, len(rows) - 0.2 + 0.8)
    ax.set_xlabel("share of the LRU -> Belady hit-rate gap closed (%)")
    ax.set_title("moe bench cache: eviction policies on recorded and synthetic routing", fontsize=10)
    ax.legend(loc="lower right", fontsize=7)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)


if __name__ == "__main__":
    main()
