#!/usr/bin/env python3
"""Side by side at one memory limit: decode tokens/s, time to first token and bytes read from storage per
decode token, one bar per side (moestream's `moe run` over expertd, the served stack, llama.cpp's variants),
from run.py --json outputs (several runs: one group of bars each, labelled by --labels).

  tools/bench/side_by_side/plot.py docs/bench_data/side_by_side_8g_a.json docs/bench_data/side_by_side_8g_b.json \
      --labels "before the page-cache fix,after" --png docs/side_by_side_8g.png
Hand-run (matplotlib: tools/bench/requirements-plot.txt).
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def side_name(r):
    return {"moestream": "moestream (moe run + expertd)", "moestream-stack": "moestream stack (HTTP)"}.get(
        r["engine"], f"llama.cpp {r.get('variant', '')}".strip())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="run.py --json outputs")
    ap.add_argument("--labels", default="", help="one label per run, comma-separated")
    ap.add_argument("--png", required=True)
    a = ap.parse_args()
    labels = a.labels.split(",") if a.labels else [f"run {i + 1}" for i in range(len(a.runs))]
    data = [json.load(open(p)) for p in a.runs]
    sides = []
    for d in data:
        for r in d["runs"]:
            if side_name(r) not in sides:
                sides.append(side_name(r))
    panels = [("decode tokens/s", lambda r: r["decode_tokens_per_second"]),
              ("time to first token (s), 512-token prompt", lambda r: r["ttft_seconds"]),
              ("GB read per decode token (moe run: experts delivered)", lambda r: r["decode_read_bytes_per_token"] / 1e9)]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.8))
    width = 0.8 / len(data)
    for ax, (title, f) in zip(axes, panels):
        for i, (d, label) in enumerate(zip(data, labels)):
            ys = []
            for s in sides:
                v = [f(r) for r in d["runs"] if side_name(r) == s]
                ys.append(sum(v) / len(v) if v else 0)
            xs = [k + (i - (len(data) - 1) / 2) * width for k in range(len(sides))]
            bars = ax.bar(xs, ys, width, label=label)
            ax.bar_label(bars, fmt="%.2f", fontsize=7)
        ax.set_xticks(range(len(sides)))
        ax.set_xticklabels(sides, rotation=20, ha="right", fontsize=8)
        ax.set_title(title, fontsize=10)
    d0 = data[0]
    fig.suptitle(f"GLM-5 layer shapes, {d0['config']['num_hidden_layers']} layers x {d0['config']['n_routed_experts']} "
                 f"experts ({d0['model_bytes'] / 1e9:.1f} GB container, {d0['gguf_bytes'] / 1e9:.1f} GB GGUF), "
                 f"each side in an {d0['limit_bytes'] / 2**30:.0f} GiB memory cgroup", fontsize=11)
    if len(data) > 1:
        axes[0].legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    fig.savefig(a.png, dpi=110)


if __name__ == "__main__":
    main()
