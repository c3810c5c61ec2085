#!/usr/bin/env python3
"""Plots `moe bench kernels --json` output into a PNG (docs/kernels_bench.png).

usage: python3 tools/bench/plot_kernels.py RESULT.json [OUT.png] [--threads 2]
Needs matplotlib (tools/bench/requirements-plot.txt); hand-run, not a test.
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("json")
    ap.add_argument("out", nargs="?", default="docs/kernels_bench.png")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    with open(args.json) as f:
        doc = json.load(f)
    rows = [r for r in doc["results"] if r["kernel"] == "matmul" and r["threads"] == args.threads]
    shapes = ["expert_gate_up", "expert_down"]
    batches = sorted({r["batch"] for r in rows})
    fig, axes = plt.subplots(3, len(shapes), figsize=(7 * len(shapes), 12), squeeze=False)
    for col, shape in enumerate(shapes):
        sr = [r for r in rows if r["shape"] == shape]
        combos = []
        for r in sr:
            c = (r["format"], r["path"])
            if c not in combos:
                combos.append(c)
        labels = [f"{f}\n{p}" for f, p in combos]
        width = 0.8 / max(len(batches), 1)
        panels = [("weight_gbps", "weight GB/s (wall)", doc.get("memory_read_gbps")),
                  ("cpu_bw_ratio", "ratio to memory read BW (CPU time)", 1.0),
                  ("gflops", "GFLOP/s", doc.get("idot_peak_gops_per_core", 0) * args.threads)]
        for row, (key, title, hline) in enumerate(panels):
            ax = axes[row][col]
            for bi, b in enumerate(batches):
                vals = []
                for c in combos:
                    m = [r[key] for r in sr if (r["format"], r["path"]) == c and r["batch"] == b]
                    vals.append(m[0] if m else 0)
                ax.bar([i + bi * width for i in range(len(combos))], vals, width, label=f"S={b}")
            if hline:
                name = {"weight_gbps": "memory read BW", "cpu_bw_ratio": "= memory BW",
                        "gflops": "int8 dot peak x threads"}[key]
                ax.axhline(hline, color="k", linestyle="--", linewidth=1, label=name)
            ax.set_xticks([i + width * (len(batches) - 1) / 2 for i in range(len(combos))])
            ax.set_xticklabels(labels, fontsize=7)
            ax.set_title(f"{shape} {title}, {args.threads} threads", fontsize=9)
            ax.legend(fontsize=7)
    fig.suptitle(f"moe bench kernels ({doc.get('isa')}); memory read "
                 f"{doc.get('memory_read_gbps_1thread', 0):.1f} / {doc.get('memory_read_gbps_2threads', 0):.1f}"
                 " GB/s (1/2 threads, wall)", fontsize=10)
    fig.tight_layout()
    fig.savefig(args.out, dpi=80)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
