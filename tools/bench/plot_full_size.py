#!/usr/bin/env python3
"""Where a full-size token's time goes, and what that predicts elsewhere.

Reads `moe run --json` outputs (their "breakdown": per decode token, ms) and
the serving plan they ran under (`moe plan --out`), and
  - draws stacked bars per component (one bar per run) into --png;
  - prints a Markdown projection table: GLM-5 tok/s predicted from the
    measured per-token costs for this machine and the machines the seed
    write-up targets, next to the peers' published figures
    (docs/BENCHMARKS.md, "Full-size GLM-5").

Projection model (stated in the table's notes, not hidden):
  t_token = resident_ms * (B_here / B_m)            resident path, memory-bound
          + experts_ms * (B_here / B_m) * (1 - 0)    routed-expert compute, memory-bound
          + disk_bytes_m / D_m                       experts that miss the cache, at the disk's rate
where resident_ms and experts_ms are measured here (median over the runs),
B is memory read bandwidth (the plan's, measured in the same session), D disk
read bandwidth, and disk_bytes_m = top_k * moe_layers * record_bytes * (1 - hit_m)
with hit_m = cache_m / all experts (uniform routing: a lower bound; skewed
routing hits more). cache_m = RAM - resident - KV at the plan's context - 1 GB.

  tools/bench/plot_full_size.py --plan one.json --run LABEL=run.json [...] --png docs/full_size_breakdown.png
Hand-run (matplotlib: tools/bench/requirements-plot.txt).
"""
import argparse
import json
import statistics

PARTS = [("attention_ms", "attention: projections"), ("attention_core_ms", "attention: core"),
         ("indexer_ms", "DSA indexer"), ("router_ms", "router"),
         ("shared_expert_ms", "shared expert"), ("dense_mlp_ms", "dense MLP"), ("routed_experts_ms", "routed experts"),
         ("fetch_wait_ms", "fetch: disk wait"), ("ipc_ms", "fetch: IPC"),
         ("fetch_other_ms", "fetch: other"), ("lm_head_ms", "LM head"),
         ("embed_ms", "embedding"), ("other_ms", "other")]

# name, RAM GB, memory read GB/s, disk read GB/s, peers' published tok/s (docs/ANCHORS.md figures, cited in the doc)
MACHINES = [
    ("consumer box: 24 GB RAM, DDR5 dual channel, PCIe 4 NVMe", 24, 60, 5.5,
     "colibri 0.05-0.1 tok/s (25 GB box)"),
    ("consumer box: 16 GB RAM, DDR5 dual channel, PCIe 5 NVMe", 16, 60, 7.0, ""),
    ("128 GB unified memory (Strix Halo class)", 128, 215, 7.0,
     "colibri 1.83 tok/s CPU-only; llama.cpp IQ1_M 1.4 tok/s"),
    ("512 GB RAM server (12-channel DDR5)", 512, 400, 7.0, "colibri 2.83 tok/s (6.91 warm), 64-core EPYC 504 GB"),
]


def load(path):
    with open(path) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--plan", required=True)
    ap.add_argument("--run", action="append", required=True, help="LABEL=moe-run.json")
    ap.add_argument("--png")
    a = ap.parse_args()
    plan = load(a.plan)
    runs = []
    for spec in a.run:
        label, _, path = spec.partition("=")
        runs.append((label, load(path)["breakdown"]["decode_per_token"]))

    if a.png:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(8, 4.5))
        x = list(range(len(runs)))
        bottom = [0.0] * len(runs)
        for key, name in PARTS:
            vals = [r.get(key, 0) / 1e3 for _, r in runs]
            if key == "fetch_other_ms":  # expert_fetch_ms is its own component: wait + IPC + the rest
                vals = [(r.get("expert_fetch_ms", 0) - r.get("fetch_wait_ms", 0) - r.get("ipc_ms", 0)) / 1e3
                        for _, r in runs]
            ax.bar(x, vals, bottom=bottom, label=name)
            bottom = [b + v for b, v in zip(bottom, vals)]
        ax.set_xticks(x, [lbl for lbl, _ in runs])
        ax.set_ylabel("seconds per decode token")
        ax.set_title("GLM-5 full size on this machine: where a decode token's time goes")
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        fig.tight_layout()
        fig.savefig(a.png, dpi=110)

    # Measured here (median over runs).
    fetch = statistics.median(r.get("expert_fetch_ms", 0) for _, r in runs)
    # The profile's components are disjoint: routed-expert compute, expert fetch and the rest (resident path).
    experts = statistics.median(r["routed_experts_ms"] for _, r in runs)
    resident = statistics.median(r["total_ms"] - r["routed_experts_ms"] - r.get("expert_fetch_ms", 0) for _, r in runs)
    total = statistics.median(r["total_ms"] for _, r in runs)
    b_here = plan["bandwidth"]["memory_gbps"]
    d_here = plan["bandwidth"]["disk_gbps"]
    m = plan["model"]
    record = plan["expert_cache"]["record_bytes"]
    all_experts = plan["expert_cache"]["records"] * record
    per_token_experts = m["top_k"] * m["moe_layers"] * record
    resident_bytes = plan["resident"]["shared_bytes"] + plan["resident"]["private_bytes_per_worker"]
    kv = plan["kv"]["bytes_per_token"] * plan["kv"]["context"]
    print(f"measured here: {total / 1e3:.2f} s/token = resident path {resident / 1e3:.2f} s + routed-expert compute "
          f"{experts / 1e3:.2f} s + fetch {fetch / 1e3:.2f} s; memory {b_here:.1f} GB/s, disk {d_here:.2f} GB/s\n")
    print("| machine | RAM | mem GB/s | disk GB/s | expert cache | hit (uniform) | disk GB/token | predicted tok/s "
          "| peers' published |")
    print("|---|---|---|---|---|---|---|---|---|")
    rows = [("this machine (measured inputs)", plan["request"]["ram_bytes"] / 1e9, b_here, d_here, "")] + MACHINES
    for name, ram_gb, bm, dm, peer in rows:
        cache = max(0.0, ram_gb * 1e9 - resident_bytes - kv - 1e9)
        hit = min(1.0, cache / all_experts)
        disk = per_token_experts * (1 - hit)
        t = (resident + experts) / 1e3 * (b_here / bm) + disk / (dm * 1e9)
        print(f"| {name} | {ram_gb:.0f} GB | {bm:.0f} | {dm:.1f} | {cache / 1e9:.1f} GB | {hit:.3f} | "
              f"{disk / 1e9:.2f} | {1 / t:.3f} | {peer} |")


if __name__ == "__main__":
    main()
