#!/usr/bin/env python3
"""Pod memory figures from a moestream serving plan (`moe plan --json` / `--out FILE`).

    tools/k8s/plan_limits.py --plan deploy/k8s/base/plan.json --conf deploy/k8s/base/moestream.conf \
        [--process-overhead 384M] [--out deploy/k8s/base/memory-plan.yaml]

Writes the ConfigMap `moestream-memory-plan` whose `*-memory` keys the Kustomize
`replacements` of deploy/k8s copy into every container's resources.requests.memory and
resources.limits.memory (equal: Guaranteed memory). docs/KUBERNETES.md explains the sums:

  expertd  = expert_cache.bytes                      (its shared-memory arena, sized once at start)
             + process overhead
  inferd   = resident.shared_bytes                   (the mapped container tensors: page cache is
                                                      charged to the cgroup that first reads a page,
                                                      so every worker's limit holds them)
             + resident.private_bytes_per_worker     (copies made at load)
             + kv.context x kv.bytes_per_token       (the planned KV of one worker)
             + prefill.pass_bytes                    (one prefill pass, when the plan has it)
             + process overhead
             + [inferd] prefix-cache-bytes of the config (not part of the plan; default 1G)
  gateway  = process overhead                        (the plan has no gateway term)

The process overhead is `moe plan --process-overhead` (384M unless the plan was made with
another value: give the same here; the tool checks that the plan's overhead_bytes leaves a
non-negative --reserve). Figures are rounded up to a whole MiB.
"""
import argparse
import json
import math
import re
import sys

MIB = 1 << 20
UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_bytes(text):
    """common/base/flags.h ParseByteSize: 123, 4K, 512M, 1.5G, 2T (binary units)."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)i?B?\s*", text, re.IGNORECASE)
    if not m:
        raise ValueError(f"not a byte size: {text!r}")
    return int(float(m.group(1)) * UNITS[m.group(2).upper()])


def conf_section(conf_text, section):
    """{key: last value} of [section] plus the lines before any section, as ArgsWithConfig reads
    moestream.conf (common/base/config_file.h)."""
    vals, sec = {}, ""
    for raw in conf_text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            sec = line.strip("[]").strip()
            continue
        key, _, v = line.partition("=")
        if sec in ("", section):
            vals[key.strip()] = v.strip()
    return vals


def conf_value(conf_text, section, key):
    """The last `key = value` of [section] (or before any section); None when absent."""
    return conf_section(conf_text, section).get(key)


def figures(plan, conf_text, process_overhead):
    if plan.get("kind") != "moestream-serving-plan":
        raise ValueError("not a moestream serving plan (moe plan --json)")
    req = plan["request"]
    workers = int(req["workers"])
    if not req["expertd"]:
        raise ValueError("the plan keeps routed experts in each worker (made without --expertd); "
                         "deploy/k8s runs expertd: make the plan with --expertd")
    res = plan["resident"]
    kv = plan["kv"]
    pass_bytes = int(plan.get("prefill", {}).get("pass_bytes", 0))
    prefix = conf_value(conf_text, "inferd", "prefix-cache-bytes")
    prefix_bytes = parse_bytes(prefix) if prefix is not None else 1 << 30
    reserve = int(plan["overhead_bytes"]) - process_overhead * (workers + 1) - workers * pass_bytes
    if reserve < 0:
        raise ValueError(f"the plan's overhead_bytes {plan['overhead_bytes']} is below {workers + 1} processes x "
                         f"--process-overhead {process_overhead}: give the --process-overhead the plan was made with")
    kv_bytes = int(kv["context"]) * int(kv["bytes_per_token"])
    parts = {
        "expertd": [("expert cache", int(plan["expert_cache"]["bytes"])), ("process overhead", process_overhead)],
        "inferd": [("shared mapped weights", int(res["shared_bytes"])),
                   ("private weights", int(res["private_bytes_per_worker"])),
                   (f"KV {kv['context']} tokens x {kv['bytes_per_token']} B", kv_bytes),
                   ("prefill pass", pass_bytes), ("process overhead", process_overhead),
                   ("prefix cache (config)", prefix_bytes)],
        "gateway": [("process overhead", process_overhead)],
    }
    out = {}
    for name, items in parts.items():
        total = sum(v for _, v in items)
        out[name] = {"bytes": total, "mib": math.ceil(total / MIB),
                     "breakdown": " + ".join(f"{label} {v}" for label, v in items if v)}
    out["workers"] = workers
    out["reserve"] = reserve
    return out


def render(plan, f, plan_path):
    m = plan["model"]
    req = plan["request"]
    lines = [
        "# Generated by tools/k8s/plan_limits.py from " + plan_path + " (moe plan --out); do not edit:",
        "# regenerate with tools/k8s/render_goldens.sh. The Kustomize replacements copy each *-memory",
        "# value into that container's resources.requests.memory and resources.limits.memory.",
        "apiVersion: v1",
        "kind: ConfigMap",
        "metadata:",
        "  name: moestream-memory-plan",
        "  labels:",
        "    app.kubernetes.io/name: moestream",
        "data:",
        f"  expertd-memory: {f['expertd']['mib']}Mi",
        f"  inferd-memory: {f['inferd']['mib']}Mi",
        f"  gateway-memory: {f['gateway']['mib']}Mi",
        f"  expertd-breakdown: \"{f['expertd']['breakdown']}\"",
        f"  inferd-breakdown: \"{f['inferd']['breakdown']}\"",
        f"  gateway-breakdown: \"{f['gateway']['breakdown']}\"",
        f"  plan: \"{m['dir']} ({m['model_type']} {m['kind']}), ram {req['ram_bytes']} B, "
        f"{req['workers']} worker(s) + expertd, total placed {plan['total_bytes']} B, reserve {f['reserve']} B\"",
    ]
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--plan", required=True, help="moe plan --out FILE / --json output")
    ap.add_argument("--conf", required=True, help="the moestream.conf the pods read ([inferd] prefix-cache-bytes)")
    ap.add_argument("--process-overhead", default="384M", help="moe plan --process-overhead the plan was made with")
    ap.add_argument("--out", help="write here instead of stdout")
    a = ap.parse_args(argv)
    with open(a.plan) as fh:
        plan = json.load(fh)
    with open(a.conf) as fh:
        conf = fh.read()
    try:
        f = figures(plan, conf, parse_bytes(a.process_overhead))
    except (KeyError, ValueError) as e:
        print(f"plan_limits: {a.plan}: {e}", file=sys.stderr)
        return 1
    text = render(plan, f, a.plan)
    if a.out:
        with open(a.out, "w") as fh:
            fh.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
