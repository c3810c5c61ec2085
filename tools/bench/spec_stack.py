#!/usr/bin/env python3
"""Speculative decoding through the served path (issue 18 (a)): expertd + one inferd + the gateway, the
demo model's container (its learned MTP head), streamed /v1/chat/completions over HTTP, paired A/B in one
run.

Per expert budget (percent of the container's routed-expert bytes, given to expertd as --budget, with
--no-page-cache so a miss is an O_DIRECT read) and per repeat, every configuration (--configs: off, auto,
mtp:K, ngram:K; auto uses --draft-tokens 3) gets a fresh stack (inferd --speculative MODE --draft-tokens
K), one untimed warm-up request, then for each --streams S: S concurrent greedy requests (the first S of
the prompts below, thinking off, temperature 0, ignore_eos, --tokens each). Decode tokens/s of a round = the completion
tokens after each stream's first / (the last stream's end - the first stream's first token). Repeats
alternate the configuration order (forward, then reversed). Reported per (budget, streams, config): the
median and spread of tok/s, the median of the per-repeat ratios to `off`, the accepted / rejected draft
tokens from usage.completion_tokens_details, and whether every stream's text equals off's (the script
fails otherwise: speculation never changes greedy output).

  python3 tools/bench/spec_stack.py [--build build] [--model models/glm-tiny-chat-q4] [--budgets 50,100]
      [--streams 1,8] [--configs off,auto,mtp:1,mtp:3] [--tokens 128] [--repeats 3] [--json OUT]
"""
import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools/serving"))
from sse import SseEvents, choice_text  # noqa: E402
from stack import Stack  # noqa: E402

PROMPTS = [
    "Who are you?",
    "What is the capital of France?",
    "Tell me a short story about a cat.",
    "How do I make a cup of tea?",
    "What should I pack for a weekend trip?",
    "Explain why the sky is blue.",
    "Give me three ideas for dinner.",
    "What is a good way to learn a new language?",
]


def expert_bytes(build, container):
    """The routed-expert bytes of a container: records x record bytes from `moe plan --json`."""
    out = subprocess.run([os.path.join(build, "tools/moe/moe"), "plan", f"--model={container}", "--ram=1G",
                          "--json"], check=True, capture_output=True, text=True, timeout=120).stdout
    cache = json.loads(out)["expert_cache"]
    return int(cache["records"]) * int(cache["record_bytes"])


def one_request(port, prompt, tokens, out, i):
    body = json.dumps({"model": "moestream", "messages": [{"role": "user", "content": prompt}], "max_tokens": tokens,
                       "temperature": 0, "ignore_eos": True, "stream": True,
                       "chat_template_kwargs": {"enable_thinking": False},
                       "stream_options": {"include_usage": True}})
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        out[i] = {"error": f"HTTP {resp.status}: {resp.read()[:500]!r}"}
        return
    text, t_first, t_last, usage = "", None, None, None
    for ev in SseEvents(resp):
        if ev.get("usage"):
            usage = ev["usage"]
        for c in ev.get("choices", []):
            piece = choice_text(c) or (c.get("delta") or {}).get("reasoning_content") or ""
            if piece:
                now = time.time()
                t_first = t_first or now
                t_last = now
                text += piece
    out[i] = {"text": text, "first": t_first, "last": t_last, "usage": usage}


def round_of(port, streams, tokens):
    out = [None] * streams
    th = [threading.Thread(target=one_request, args=(port, PROMPTS[i % len(PROMPTS)], tokens, out, i))
          for i in range(streams)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    for o in out:
        if o is None or "error" in o:
            raise RuntimeError(f"request failed: {o}")
    decoded = sum(o["usage"]["completion_tokens"] - 1 for o in out)
    secs = max(o["last"] for o in out) - min(o["first"] for o in out)
    det = [o["usage"].get("completion_tokens_details") or {} for o in out]
    return {"tps": decoded / secs if secs > 0 else 0.0, "texts": [o["text"] for o in out],
            "accepted": sum(d.get("accepted_prediction_tokens", 0) for d in det),
            "rejected": sum(d.get("rejected_prediction_tokens", 0) for d in det),
            "completion_tokens": sum(o["usage"]["completion_tokens"] for o in out)}


def parse_config(c):
    mode, _, k = c.partition(":")
    if mode not in ("off", "auto", "mtp", "ngram"):
        sys.exit(f"--configs: unknown mode {mode!r} (off, auto, mtp:K, ngram:K)")
    return mode, int(k) if k else 3


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models/glm-tiny-chat-q4"))
    ap.add_argument("--budgets", default="50,100")
    ap.add_argument("--streams", default="1,8")
    ap.add_argument("--configs", default="off,auto,mtp:1,mtp:3")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args()
    configs = a.configs.split(",")
    if "off" not in configs:
        sys.exit("--configs must include off (the reference)")
    for c in configs:
        parse_config(c)
    streams = [int(s) for s in a.streams.split(",")]
    total = expert_bytes(a.build, a.model)
    if total <= 0:
        sys.exit(f"{a.model}: moe plan reports no routed-expert bytes")
    results = []
    for budget in [int(b) for b in a.budgets.split(",")]:
        budget_bytes = max(1, total * budget // 100)
        runs = {c: {s: [] for s in streams} for c in configs}
        ref = {}
        for rep in range(a.repeats):
            order = configs if rep % 2 == 0 else list(reversed(configs))
            for c in order:
                mode, k = parse_config(c)
                st = Stack(a.build, workers=1, worker_bin=os.path.join(a.build, "services/inferd/inferd"),
                           worker_args=[f"--model={a.model}", f"--speculative={mode}", f"--draft-tokens={k}",
                                        "--max-sequences=8"],
                           gateway_args=[f"--tokenizer={a.model}"], expertd_model=a.model,
                           expertd_budget=str(budget_bytes), expertd_args=["--no-page-cache"],
                           startup_timeout=60)
                try:
                    round_of(st.port, 1, 16)  # warm-up: the arena and the kernels' first touch
                    for s in streams:
                        r = round_of(st.port, s, a.tokens)
                        runs[c][s].append(r)
                        key = (s,)
                        if c == "off" and key not in ref:
                            ref[key] = r["texts"]
                        print(f"budget {budget}% rep {rep} {c:8s} streams {s}: {r['tps']:8.1f} tok/s "
                              f"accepted {r['accepted']} rejected {r['rejected']}", flush=True)
                finally:
                    st.stop()
        for s in streams:
            offs = [r["tps"] for r in runs["off"][s]]
            for c in configs:
                rs = runs[c][s]
                for r in rs:
                    if (s,) in ref and r["texts"] != ref[(s,)]:
                        sys.exit(f"budget {budget}% streams {s} {c}: the text differs from off's")
                tps = [r["tps"] for r in rs]
                ratios = [t / o for t, o in zip(tps, offs) if o > 0]
                acc = sum(r["accepted"] for r in rs)
                rej = sum(r["rejected"] for r in rs)
                ct = sum(r["completion_tokens"] for r in rs)
                results.append({"budget_percent": budget, "streams": s, "config": c,
                                "tps_median": statistics.median(tps), "tps_min": min(tps), "tps_max": max(tps),
                                "x_off": statistics.median(ratios), "accepted": acc, "rejected": rej,
                                "completion_tokens": ct, "same_text_as_off": True})
    print("\n| budget | streams | config | tok/s (min..max) | x off | accepted / rejected drafts per 100 tokens |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in results:
        per = 100.0 / max(1, r["completion_tokens"])
        print(f"| {r['budget_percent']}% | {r['streams']} | {r['config']} | {r['tps_median']:.1f} "
              f"({r['tps_min']:.1f}..{r['tps_max']:.1f}) | {r['x_off']:.2f} | "
              f"{r['accepted'] * per:.1f} / {r['rejected'] * per:.1f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"model": a.model, "tokens": a.tokens, "repeats": a.repeats, "expert_bytes": total,
                       "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
