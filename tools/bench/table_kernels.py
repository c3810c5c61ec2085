#!/usr/bin/env python3
"""Prints the docs/BENCHMARKS.md `## kernels` tables from `moe bench kernels --json` output.

usage: python3 tools/bench/table_kernels.py RESULT.json [REPEAT.json ...]
With REPEAT files (runs of the target subset), the targets table is also given as
the median and range over all runs. Standard library only.
"""
import json
import sys


def main():
    doc = json.load(open(sys.argv[1]))
    repeats = [json.load(open(p)) for p in sys.argv[2:]]
    res = [r for r in doc["results"]]
    fj = doc["fork_join"]
    if "loadavg_start" in doc:
        print(f"Load average (1 min) {doc['loadavg_start']:.1f} at start, {doc['loadavg_end']:.1f} at end; "
              f"per shape: " + ", ".join(f"{p['before']} {p['loadavg_1min']:.1f}" for p in doc["memory_probes"]) + ".\n")
    print(f"ISA {doc['isa']}; L3 {doc['l3_bytes'] >> 20} MiB, weight rotation {doc['rotate_bytes'] >> 20} MiB; "
          f"memory read (median of probes, wall) {doc['memory_read_gbps_1thread']:.1f} GB/s 1 thread, "
          f"{doc['memory_read_gbps_2threads']:.1f} GB/s 2 threads; CPU-time based "
          f"{doc['cpu_memory_read_gbps_1thread']:.1f} / {doc['cpu_memory_read_gbps_2threads']:.1f} GB/s; "
          f"int8 dot peak {doc['idot_peak_gops_per_core']:.0f} GOPS/core; fork/join "
          f"{fj['fork_join_us']:.1f} us/call spinning, {fj['fork_join_after_sleep_us']:.1f} us after sleep "
          f"(tiny call {fj['tiny_call_us_1thread']:.2f} us on 1 thread).\n")
    print("| shape | format | path | S | T | median us | spread % | GB/s | ratio (wall) | ratio (CPU time) | GFLOP/s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in res:
        if r["kernel"] != "matmul":
            continue
        spread = (r["seconds_max"] - r["seconds_min"]) / r["seconds"] * 100
        print(f"| {r['shape']} | {r['format']} | {r['path']} | {r['batch']} | {r['threads']} | "
              f"{r['seconds'] * 1e6:.0f} | {spread:.0f} | {r['weight_gbps']:.2f} | {r['bw_ratio']:.2f} | "
              f"{r['cpu_bw_ratio']:.2f} | {r['gflops']:.1f} |")
    print("\nFused gate+up+SwiGLU (2 matrices per call):\n")
    print("| format | path | S | T | median us | GB/s | ratio (CPU time) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in res:
        if r["kernel"] == "gate_up_swiglu":
            print(f"| {r['format']} | {r['path']} | {r['batch']} | {r['threads']} | {r['seconds'] * 1e6:.0f} | "
                  f"{r['weight_gbps']:.2f} | {r['cpu_bw_ratio']:.2f} |")

    def get(shape, fmt, path, s, t, key):
        for r in res:
            if (r["kernel"], r["shape"], r["format"], r["path"], r["batch"], r["threads"]) == \
                    ("matmul", shape, fmt, path, s, t):
                return r[key]
        return None

    print("\nTargets (expert shapes, 2 threads):\n")
    print("| shape | format | S=1 ratio wall / CPU | S=4 / S=1 GB/s (wall / CPU) | IDOT / float S=1 | IDOT / float S=4 |")
    print("| --- | --- | --- | --- | --- | --- |")
    for shape in ("expert_gate_up", "expert_down"):
        for fmt in ("q4_g32", "q4_g64", "q4_g128", "q8_row", "q8_g128"):
            g1 = get(shape, fmt, "idot", 1, 2, "weight_gbps")
            if g1 is None:
                continue
            c1 = get(shape, fmt, "idot", 1, 2, "cpu_weight_gbps")
            g4 = get(shape, fmt, "idot", 4, 2, "weight_gbps")
            c4 = get(shape, fmt, "idot", 4, 2, "cpu_weight_gbps")
            f1 = get(shape, fmt, "float", 1, 2, "cpu_weight_gbps")
            f4 = get(shape, fmt, "float", 4, 2, "cpu_weight_gbps")
            print(f"| {shape} | {fmt} | {get(shape, fmt, 'idot', 1, 2, 'bw_ratio'):.2f} / "
                  f"{get(shape, fmt, 'idot', 1, 2, 'cpu_bw_ratio'):.2f} | {g4 / g1:.2f} / {c4 / c1:.2f} | "
                  f"{c1 / f1 if f1 else float('nan'):.2f} | {c4 / f4 if f4 else float('nan'):.2f} |")


    if not repeats:
        return
    runs = [doc] + repeats

    def rget(d, shape, fmt, s, t, key):
        for r in d["results"]:
            if (r["kernel"], r["shape"], r["format"], r["path"], r["batch"], r["threads"]) == \
                    ("matmul", shape, fmt, "idot", s, t):
                return r[key]
        return None

    def med(v):
        v = sorted(v)
        return v[len(v) // 2]

    print(f"\nTargets over {len(runs)} runs (CPU-time ratios, median [min-max]; load averages "
          + ", ".join(f"{d.get('loadavg_start', -1):.0f}-{d.get('loadavg_end', -1):.0f}" for d in runs) + "):\n")
    print("| shape | format | T | S=1 / memory read | S=4 / S=1 GB/s |")
    print("| --- | --- | --- | --- | --- |")
    for shape in ("expert_gate_up", "expert_down"):
        for fmt in ("q4_g32", "q4_g64", "q4_g128", "q8_row", "q8_g128"):
            for t in (1, 2):
                r1 = [rget(d, shape, fmt, 1, t, "cpu_bw_ratio") for d in runs]
                q = [(rget(d, shape, fmt, 4, t, "cpu_weight_gbps"), rget(d, shape, fmt, 1, t, "cpu_weight_gbps"))
                     for d in runs]
                r1 = [x for x in r1 if x is not None]
                q = [a / b for a, b in q if a is not None and b]
                if not r1 or not q:
                    continue
                print(f"| {shape} | {fmt} | {t} | {med(r1):.2f} [{min(r1):.2f}-{max(r1):.2f}] | "
                      f"{med(q):.2f} [{min(q):.2f}-{max(q):.2f}] |")


if __name__ == "__main__":
    main()
