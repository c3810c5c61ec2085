#!/usr/bin/env python3
"""Speculative decoding against off: decode tok/s ratio per configuration, budget and stream count.

Reads a `tools/bench/spec_stack.py --json` output (the demo model through the stack) and, optionally, a
`moe bench spec --json` output of planted-acceptance runs (--planted: the GLM-5-shaped slice through expertd),
and draws one panel per (source, streams): grouped bars of "x off" (median of per-repeat ratios) per expert
budget, one bar per configuration, with each configuration's tok/s min..max over off's median as error bars and a line at 1.

  tools/bench/plot_spec.py docs/bench_data/spec_stack.json --planted docs/bench_data/spec_planted_g5r3.json \
      --png docs/spec_vs_off.png
Hand-run (matplotlib: tools/bench/requirements-plot.txt).
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def stack_panels(path):
    with open(path) as f:
        rows = json.load(f)["results"]
    panels = {}
    for r in rows:
        key = f"demo model through the stack, {r['streams']} stream{'s' if r['streams'] > 1 else ''}"
        off = next(o for o in rows if o["budget_percent"] == r["budget_percent"] and o["streams"] == r["streams"]
                   and o["config"] == "off")
        lo, hi = r["tps_min"] / off["tps_median"], r["tps_max"] / off["tps_median"]
        panels.setdefault(key, []).append((r["budget_percent"], r["config"], r["x_off"], lo, hi))
    return panels


def planted_panels(path):
    """`moe bench spec --json` (a list of rows: budget_pct, config, ratio_to_off_median, tps_min/max/median)."""
    with open(path) as f:
        rows = json.load(f)
    out = []
    for r in rows:
        if r["config"] == "off":
            continue
        off = next(o for o in rows if o["budget_pct"] == r["budget_pct"] and o["config"] == "off")
        out.append((r["budget_pct"], r["config"],
                    r["ratio_to_off_median"], r["tps_min"] / off["tps_median"], r["tps_max"] / off["tps_median"]))
    return {"GLM-5-shaped slice via expertd (planted acceptance), 1 stream": out}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stack", help="tools/bench/spec_stack.py --json output")
    ap.add_argument("--planted", help="moe bench spec --json output (planted acceptance)")
    ap.add_argument("--png", required=True)
    a = ap.parse_args()
    panels = stack_panels(a.stack)
    if a.planted:
        panels.update(planted_panels(a.planted))
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.2), squeeze=False)
    for ax, (title, rows) in zip(axes[0], panels.items()):
        budgets = sorted({b for b, *_ in rows})
        configs = [c for c in dict.fromkeys(c for _, c, *_ in rows) if c != "off"]
        configs.sort(key=lambda c: not c.startswith("auto"))  # auto first: the same colour in every panel
        width = 0.8 / max(1, len(configs))
        for i, c in enumerate(configs):
            xs, ys, err_lo, err_hi = [], [], [], []
            for j, b in enumerate(budgets):
                hit = [r for r in rows if r[0] == b and r[1] == c]
                if not hit:
                    continue
                _, _, x, lo, hi = hit[0]
                xs.append(j + (i - (len(configs) - 1) / 2) * width)
                ys.append(x)
                err_lo.append(max(0.0, x - lo))
                err_hi.append(max(0.0, hi - x))
            ax.bar(xs, ys, width, label=c, yerr=[err_lo, err_hi], capsize=2)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks(range(len(budgets)), [f"{b}%" for b in budgets])
        ax.set_xlabel("expert budget")
        ax.set_ylabel("decode tok/s / off")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(a.png, dpi=120)


if __name__ == "__main__":
    main()
