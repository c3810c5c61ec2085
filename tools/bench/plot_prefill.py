#!/usr/bin/env python3
"""Planned vs chunked prefill: expert bytes read per prompt length, over the distinct-expert floor.

Reads `moe bench prefill --json` outputs (any number; their "prompts" rows are merged by length)
and draws two panels into --png: GB of routed experts read (log scale) for chunked and planned
prefill with the floor (each distinct expert once), and time to first token.

  tools/bench/plot_prefill.py docs/bench_data/prefill_g5s3_*.json --png docs/prefill_bytes.png
Hand-run (matplotlib: tools/bench/requirements-plot.txt).
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="moe bench prefill --json outputs")
    ap.add_argument("--png", required=True)
    ap.add_argument("--title", default="GLM-5-shaped slice (2 MoE layers x 256 experts), 3.1% expert cache")
    a = ap.parse_args()
    rows = {}
    for path in a.runs:
        with open(path) as f:
            for r in json.load(f)["prompts"]:
                rows[r["tokens"]] = r
    n = sorted(rows)
    gb = lambda v: v / 1e9  # noqa: E731
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    ax1.plot(n, [gb(rows[t]["chunked"]["bytes"]) for t in n], "o-", label="chunked (128 tokens per step)")
    ax1.plot(n, [gb(rows[t]["planned"]["bytes"]) for t in n], "s-", label="planned (layer-major passes)")
    ax1.plot(n, [gb(rows[t]["distinct_bytes"]) for t in n], "k:", label="floor: each distinct expert once")
    ax1.set_xscale("log", base=2)
    ax1.set_yscale("log")
    ax1.set_xlabel("prompt tokens")
    ax1.set_ylabel("routed-expert GB read")
    ax1.legend(fontsize=8)
    ax2.plot(n, [rows[t]["chunked"]["ttft_s"] for t in n], "o-", label="chunked")
    ax2.plot(n, [rows[t]["planned"]["ttft_s"] for t in n], "s-", label="planned")
    ax2.set_xscale("log", base=2)
    ax2.set_yscale("log")
    ax2.set_xlabel("prompt tokens")
    ax2.set_ylabel("time to first token, s")
    ax2.set_title("busy 2-vCPU VM; experts are file holes", fontsize=8)
    ax2.legend(fontsize=8)
    fig.suptitle(a.title, fontsize=10)
    fig.tight_layout()
    fig.savefig(a.png, dpi=110)
    print(a.png)


if __name__ == "__main__":
    main()
