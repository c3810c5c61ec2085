#!/usr/bin/env python3
"""Expert-parallel decode figures on fake hosts (docs/MULTIHOST.md, "Tests without a cluster":
decode tok/s of 1, 2 and 4 fake hosts at 1, 10 and 25 Gbit/s caps and bytes on the wire per
token, beside the one-host figure).

Model: a GLM-5-shaped slice (GLM-5's real widths: hidden 6,144, 256 routed experts of 21 MB
(q4_g64) per MoE layer, top-8; 3 layers = 1 dense + 2 MoE, experts as file holes; ~2.6 GB
resident), made once with --make-model:
    moe synth --config glm-5 --container --set num_hidden_layers=3 --set first_k_dense_replace=1
              --set num_nextn_predict_layers=0 --real-expert-layers none
              --tokenizer models/tiny-glm-random --out DIR
Each fake host gets the container as hard links (fake_hosts --link-model: no GB copied, one page
cache for all hosts) and an expertd budget suited to 21 MB experts (--expertd-budget, 2G).

For every host count H (1 = one host, no peer flags: the baseline; H >= 2: the expert-parallel
inferd, `moe ownership`'s map, gateway on host 0) and every cap (tc tbf on every host's veth,
both ends; H = 1 has no peer traffic, so it is measured once without one): one warm-up request,
then --repeats greedy streamed requests of a fixed prompt (ignore_eos, --max-tokens, logprobs so
every token is its own SSE event). Per request:
  - decode tok/s = (tokens - 1) / (last token's arrival - first token's arrival) (client side);
  - TTFT (first token's arrival - request sent);
  - bytes on the wire = the sum over hosts of bytes sent on eth0 (nftables counters) during the
    request, per generated token (prefill's rows included);
  - fallbacks: inferd's "its experts run on this host" lines on host 0 during the configuration
    (a peer past --peer-deadline-ms: the figure is then partly local);
  - the tokens equal the one-host tokens (greedy, bit-identical combination).
Reported: median and min..max per configuration, a markdown table on stdout, --json FILE,
--png FILE (matplotlib, when installed). Memory: MemAvailable is sampled while it runs (reported;
the run stops below --min-available-gib).

    tools/multihost/bench_hosts.py --make-model --hosts 1,2,4 --caps 1,10,25 --repeats 3 \\
        --json build/multihost/bench_hosts.json --png build/multihost/bench_hosts.png
Needs root (network namespaces), the built services (--build). Python 3 stdlib (+ matplotlib).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fake_hosts as fh  # noqa: E402

ROOT = fh.ROOT
PROMPT = "Tell me a long story about a lighthouse keeper and the sea."
FALLBACK_LINE = "its experts run on this host"
SYNTH_ARGS = ["--config", "glm-5", "--container", "--set", "num_hidden_layers=3", "--set", "first_k_dense_replace=1",
              "--set", "num_nextn_predict_layers=0", "--real-expert-layers", "none"]


def log(msg):
    print(f"[bench_hosts] {msg}", file=sys.stderr, flush=True)


def make_model(build, out):
    argv = [os.path.join(build, "tools/moe/moe"), "synth"] + SYNTH_ARGS + [
        "--tokenizer", os.path.join(ROOT, "models", "tiny-glm-random"), "--out", out]
    log("making the GLM-5-shaped slice: " + " ".join(argv))
    t0 = time.time()
    r = subprocess.run(argv, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        raise SystemExit(f"moe synth: exit {r.returncode}")
    log(f"slice made in {time.time() - t0:.0f} s")


def model_shape(model):
    with open(os.path.join(model, "config.json")) as f:
        c = json.load(f)
    layers = c["num_hidden_layers"]
    dense = c.get("first_k_dense_replace", 0)
    return {"hidden": c["hidden_size"], "layers": layers, "moe_layers": layers - dense,
            "experts": c.get("n_routed_experts"), "top_k": c.get("num_experts_per_tok"),
            "moe_intermediate": c.get("moe_intermediate_size"), "vocab": c.get("vocab_size")}


def design_bytes_per_token(shape, hosts):
    """docs/MULTIHOST.md's estimate: per MoE layer k(H-1)/H remote (row, expert) outputs of a bf16
    row each, plus one bf16 input row per remote host asked (at most H-1, at most the remote uses)."""
    if hosts < 2:
        return 0
    row = shape["hidden"] * 2
    remote = shape["top_k"] * (hosts - 1) / hosts
    return int(shape["moe_layers"] * (remote * row + min(hosts - 1, remote) * row))


class MemWatch:
    """Samples /proc/meminfo (MemAvailable, MemTotal) every period; `low` is set below floor."""

    def __init__(self, floor_gib, period=0.5):
        self.floor = floor_gib * 2**30
        self.period = period
        self.min_avail = None
        self.total = None
        self.low = threading.Event()
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def read():
        out = {}
        with open("/proc/meminfo") as f:
            for line in f:
                k, v = line.split(":", 1)
                out[k] = int(v.split()[0]) * 1024
        return out

    def _run(self):
        while not self._stop.is_set():
            m = self.read()
            self.total = m["MemTotal"]
            a = m["MemAvailable"]
            self.min_avail = a if self.min_avail is None else min(self.min_avail, a)
            if a < self.floor:
                self.low.set()
            self._stop.wait(self.period)

    def start(self):
        self._t.start()
        return self

    def stop(self):
        self._stop.set()
        self._t.join(5)

    def check(self):
        if self.low.is_set():
            raise fh.HarnessError(f"MemAvailable fell below {self.floor / 2**30:.1f} GiB "
                                  f"(min {self.min_avail / 2**30:.1f} GiB): stopping")


def one_request(c, args):
    """One streamed greedy request to host 0's gateway: a dict of its figures."""
    before = [c.wire_bytes(i)["tx"] for i in range(c.n_hosts)]
    s = c.chat_stream(args.prompt, args.max_tokens, timeout=args.request_timeout, ignore_eos=True, logprobs=True)
    if s.error is not None:
        raise fh.HarnessError(f"HTTP {s.status}: {s.error}")
    times, tokens, usage = [], [], None
    for t, ch in s:
        for choice in ch.get("choices", []):
            for e in (choice.get("logprobs") or {}).get("content") or []:
                times.append(t)
                tokens.append(e.get("token"))
        usage = ch.get("usage") or usage
    s.close()
    after = [c.wire_bytes(i)["tx"] for i in range(c.n_hosts)]
    n = (usage or {}).get("completion_tokens", len(times))
    if len(times) < 2:
        raise fh.HarnessError(f"{len(times)} token events (logprobs) in the stream: nothing to time")
    wire = sum(a - b for a, b in zip(after, before))
    return {"tokens": n, "ttft_s": times[0] - s.t_sent, "total_s": times[-1] - s.t_sent,
            "decode_tok_s": (len(times) - 1) / (times[-1] - times[0]) if times[-1] > times[0] else None,
            "wire_bytes": wire, "wire_bytes_per_token": wire / n if n else None, "token_texts": tokens}


def stats(values):
    v = [x for x in values if x is not None]
    if not v:
        return None
    return {"median": statistics.median(v), "min": min(v), "max": max(v), "n": len(v)}


def measure(c, args, mem, label):
    """Warm-up + repeats on the cluster as it is now (caps already set)."""
    h0 = c.hosts[0]
    off = os.path.getsize(h0.log_path("inferd0")) if os.path.exists(h0.log_path("inferd0")) else 0
    t0 = time.time()
    for _ in range(args.warmup):
        one_request(c, args)
        mem.check()
    runs = []
    for i in range(args.repeats):
        r = one_request(c, args)
        mem.check()
        runs.append(r)
        log(f"{label} run {i + 1}/{args.repeats}: {r['decode_tok_s']:.2f} tok/s decode, TTFT {r['ttft_s']:.2f} s, "
            f"{r['wire_bytes_per_token'] / 1e3:.1f} KB/token on the wire")
    with open(h0.log_path("inferd0"), "rb") as f:
        f.seek(off)
        fallbacks = f.read().decode(errors="replace").count(FALLBACK_LINE)
    return {"decode_tok_s": stats([r["decode_tok_s"] for r in runs]), "ttft_s": stats([r["ttft_s"] for r in runs]),
            "wire_bytes_per_token": stats([r["wire_bytes_per_token"] for r in runs]),
            "fallbacks": fallbacks, "seconds": time.time() - t0,
            "runs": [{k: v for k, v in r.items() if k != "token_texts"} for r in runs],
            "_tokens": [r["token_texts"] for r in runs]}


def cluster(args, hosts, tag):
    peers = hosts > 1
    inferd_args = list(args.inferd_arg)
    if peers and args.peer_suspect_ms is not None:
        inferd_args.append(f"--peer-suspect-ms={args.peer_suspect_ms}")
    return fh.FakeCluster(hosts, build=args.build, model=args.model, tag=tag, subnet=args.subnet, peers=peers,
                          link_model=True, expertd_budget=args.expertd_budget, inferd_args=inferd_args,
                          peer_deadline_ms=args.peer_deadline_ms, start_timeout=args.start_timeout,
                          log=lambda m: log(f"fake_hosts: {m}"))


def fmt_stat(s, scale=1.0, digits=2):
    if not s:
        return "-"
    if s["n"] == 1:
        return f"{s['median'] * scale:.{digits}f}"
    return f"{s['median'] * scale:.{digits}f} ({s['min'] * scale:.{digits}f}..{s['max'] * scale:.{digits}f})"


def table(result):
    one = result["one_host"]
    base = one["decode_tok_s"]["median"] if one and one.get("decode_tok_s") else None
    lines = ["| hosts | cap (Gbit/s) | decode tok/s, median (min..max) | x one host | wire KB/token, median "
             "(min..max) | design est. KB/token | TTFT s, median | fallbacks | tokens = one host |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    rows = ([dict(one, hosts=1, cap_gbit=None)] if one else []) + result["results"]
    for r in rows:
        tok = r.get("decode_tok_s")
        x = f"{tok['median'] / base:.2f}" if tok and base else "-"
        cap = "-" if r["cap_gbit"] is None else f"{r['cap_gbit']:g}"
        est = design_bytes_per_token(result["model_shape"], r["hosts"])
        lines.append(f"| {r['hosts']}{' (no peers)' if r['hosts'] == 1 else ''} | {cap} | {fmt_stat(tok)} | {x} | "
                     f"{fmt_stat(r.get('wire_bytes_per_token'), 1e-3, 1)} | {est / 1e3:.1f} | "
                     f"{fmt_stat(r.get('ttft_s')) if r.get('ttft_s') else '-'} | {r.get('fallbacks', 0)} | "
                     f"{'-' if r['hosts'] == 1 else ('yes' if r.get('same_tokens') else 'NO')} |")
    return "\n".join(lines)


def plot(result, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib is not installed: no --png")
        return False
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.2))
    caps = sorted({r["cap_gbit"] for r in result["results"]})
    for h in sorted({r["hosts"] for r in result["results"]}):
        rs = sorted((r for r in result["results"] if r["hosts"] == h and r.get("decode_tok_s")),
                    key=lambda r: r["cap_gbit"])
        if not rs:
            continue
        xs = [r["cap_gbit"] for r in rs]
        med = [r["decode_tok_s"]["median"] for r in rs]
        lo = [m - r["decode_tok_s"]["min"] for m, r in zip(med, rs)]
        hi = [r["decode_tok_s"]["max"] - m for m, r in zip(med, rs)]
        a1.errorbar(xs, med, yerr=[lo, hi], marker="o", capsize=3, label=f"{h} hosts")
        a2.plot(xs, [r["wire_bytes_per_token"]["median"] / 1e3 for r in rs], marker="o", label=f"{h} hosts")
        a2.axhline(design_bytes_per_token(result["model_shape"], h) / 1e3, ls=":", lw=1, color=a2.lines[-1].get_color())
    one = result.get("one_host")
    if one and one.get("decode_tok_s"):
        a1.axhline(one["decode_tok_s"]["median"], color="k", ls="--", label="one host")
    for a in (a1, a2):
        a.set_xscale("log")
        a.set_xticks(caps)
        a.set_xticklabels([f"{c:g}" for c in caps])
        a.set_xlabel("link cap per host (Gbit/s, tc tbf)")
        a.grid(alpha=0.3)
        a.legend()
    a1.set_ylabel("decode tok/s (median, min..max)")
    a1.set_ylim(bottom=0)
    a2.set_ylabel("wire KB per token (dotted: design est.)")
    a2.set_ylim(bottom=0)
    fig.suptitle(f"GLM-5-shaped slice ({result['model_shape']['moe_layers']} MoE layers x "
                 f"{result['model_shape']['experts']} experts) on fake hosts, {result['machine']['cpus']} CPUs")
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    fig.savefig(path, dpi=120)
    log(f"wrote {path}")
    return True


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--model", help="the GLM-5-shaped container (default BUILD/multihost/glm5-slice)")
    ap.add_argument("--make-model", action="store_true", help="moe synth the slice into --model if it is not there")
    ap.add_argument("--hosts", default="1,2,4", help="host counts (1 = the one-host baseline)")
    ap.add_argument("--caps", default="1,10,25", help="link caps, Gbit/s (tc tbf on every host's veth)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1, help="requests before the timed ones, per configuration")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--prompt", default=PROMPT)
    ap.add_argument("--expertd-budget", default="2G", help="each host's expertd budget (21 MB per expert)")
    ap.add_argument("--peer-deadline-ms", type=int, default=250)
    ap.add_argument("--peer-suspect-ms", type=int, help="inferd --peer-suspect-ms (default: inferd's)")
    ap.add_argument("--inferd-arg", action="append", default=[], help="extra inferd flag (repeatable)")
    ap.add_argument("--request-timeout", type=float, default=300)
    ap.add_argument("--start-timeout", type=float, default=600)
    ap.add_argument("--min-available-gib", type=float, default=1.5, help="stop when MemAvailable falls below")
    ap.add_argument("--subnet", type=int, default=9)
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--png", help="plot here (matplotlib)")
    args = ap.parse_args(argv)
    args.build = os.path.abspath(args.build)
    args.model = os.path.abspath(args.model or os.path.join(args.build, "multihost", "glm5-slice"))
    hosts = [int(x) for x in args.hosts.split(",") if x]
    caps = [float(x) for x in args.caps.split(",") if x]
    ok, why = fh.can_run()
    if not ok:
        print(f"bench_hosts: cannot make fake hosts here: {why}", file=sys.stderr)
        return 77
    if not os.path.isfile(os.path.join(args.model, "moestream.json")):
        if not args.make_model:
            print(f"bench_hosts: no container at {args.model} (--make-model makes it)", file=sys.stderr)
            return 2
        make_model(args.build, args.model)
    shape = model_shape(args.model)
    mem = MemWatch(args.min_available_gib).start()
    result = {"model": args.model, "model_shape": shape, "prompt": args.prompt, "max_tokens": args.max_tokens,
              "repeats": args.repeats, "warmup": args.warmup, "expertd_budget": args.expertd_budget,
              "peer_deadline_ms": args.peer_deadline_ms, "peer_suspect_ms": args.peer_suspect_ms,
              "machine": {"cpus": os.cpu_count(), "mem_total_gib": round(MemWatch.read()["MemTotal"] / 2**30, 1)},
              "one_host": None, "results": []}
    ref_tokens = None
    t_start = time.time()
    tag = f"bench{os.getpid()}"
    try:
        for h in hosts:
            t0 = time.time()
            with cluster(args, h, tag) as c:
                log(f"{h} host(s) up in {time.time() - t0:.0f} s; MemAvailable "
                    f"{MemWatch.read()['MemAvailable'] / 2**30:.1f} GiB")
                for cap in ([None] if h == 1 else caps):
                    for i in range(h):
                        c.bandwidth(i, cap)
                    label = f"{h} host(s)" + ("" if cap is None else f", {cap:g} Gbit/s")
                    r = measure(c, args, mem, label)
                    toks = r.pop("_tokens")
                    if ref_tokens is None and h == 1:
                        ref_tokens = toks[0]
                    r.update(hosts=h, cap_gbit=cap,
                             same_tokens=None if ref_tokens is None else all(t == ref_tokens for t in toks))
                    if h == 1:
                        result["one_host"] = r
                    else:
                        result["results"].append(r)
                    for i in range(h):
                        c.bandwidth(i, None)
    except (fh.HarnessError, KeyboardInterrupt) as e:
        log(f"stopped: {e}")
        result["error"] = str(e)
    finally:
        mem.stop()
        fh.sweep(tag)
    result["memory"] = {"min_available_gib": round(mem.min_avail / 2**30, 2) if mem.min_avail else None,
                        "total_gib": round((mem.total or 0) / 2**30, 1)}
    result["seconds"] = round(time.time() - t_start, 1)
    print(table(result))
    print(f"\n{shape['moe_layers']} MoE layers x {shape['experts']} experts (top-{shape['top_k']}, hidden "
          f"{shape['hidden']}), {args.max_tokens} tokens per request, {args.repeats} repeats after {args.warmup} "
          f"warm-up, expertd budget {args.expertd_budget}, {os.cpu_count()} CPUs shared by every fake host; "
          f"lowest MemAvailable {result['memory']['min_available_gib']} GiB; {result['seconds']:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
        log(f"wrote {args.json}")
    if args.png and (result["results"] or result["one_host"]):
        plot(result, args.png)
    return 1 if "error" in result else 0


if __name__ == "__main__":
    sys.exit(main())
