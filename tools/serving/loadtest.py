#!/usr/bin/env python3
"""Bounded load test of the serving stack: C concurrent streaming clients,
each making R requests (completions and chat, alternating), against a local
stack it starts itself (toy test model workers + gateway) or an existing
gateway on loopback (--url). Every answer is checked against the text the
toy model must produce for that exact prompt, so a lost, truncated or
mixed-up stream counts as an error; 503s are counted as rejections.

Reports throughput (generated tokens/s, requests/s) and p50/p99 of time to
first token (TTFT) and inter-token latency (ITL).

  tools/serving/loadtest.py --build build --workers 2 --clients 32 --requests 4

--engine MODEL_DIR: the real engine instead of the toy. The model is converted
to a container (moe convert); each run starts expertd + N inferd workers that
get their experts from it + the gateway with the model's tokenizer. Clients
send varied prompts (short and long: long ones are prefilled in chunks while
other streams decode), greedy, streaming. The same load runs with the fused
batched forward (one forward per step over all sequences) and with
--batched-forward=false (one forward per sequence per step), alternating,
--repeats times, each on a fresh stack; every answer of every run must be
identical to the first run's (batch invariance), else it counts as an error.
  tools/serving/loadtest.py --build build --engine models/tiny-glm-random --workers 2 --clients 16 --requests 4
Traffic: 127.0.0.1 only; the run is bounded by --deadline seconds.
"""
import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(__file__))
from sse import SseEvents  # noqa: E402
from stack import Stack  # noqa: E402

SCRIPT = "The quick brown fox jumps over the lazy dog."


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, int(round(p / 100.0 * (len(xs) - 1)))))
    return xs[k]


def one_request(host, port, i, j, max_tokens, deadline):
    """Returns (status, ttft, [itl...], tokens, ok, detail)."""
    k = (i * 7 + j) % 10
    if j % 2 == 0:  # completions: position-based script from the prompt length
        path = "/v1/completions"
        body = {"model": "moestream", "prompt": "x" * (k + 1), "max_tokens": max_tokens, "temperature": 0,
                "stream": True}
        expect = SCRIPT[k + 1:k + 1 + max_tokens]
        field = "text"
    else:
        path = "/v1/chat/completions"
        n = 5 + k
        body = {"model": "moestream", "messages": [{"role": "user", "content": f"client {i} request {j}"}],
                "max_tokens": n, "temperature": 0, "stream": True}
        expect = SCRIPT[:n]
        field = "content"
    status, ttft, itl, toks, text, done = stream_request(host, port, path, body, field, deadline)
    if status != 200:
        return status, None, [], 0, status == 503, f"HTTP {status}"
    ok = done and text == expect
    return 200, ttft, itl, toks, ok, "" if ok else f"got {text!r} want {expect!r} done={done}"


def run_clients(clients, requests, request, deadline):
    """Client i < clients sends request(i, j) for j < requests, one thread per client, until done or the deadline.

    request returns (result, payload); result is (status, ttft, [itl], tokens, ok, detail). Returns the
    results, the payloads of the ok results by (i, j), and the wall seconds."""
    results, payloads, lock = [], {}, threading.Lock()

    def client(i):
        for j in range(requests):
            if time.time() > deadline:
                with lock:
                    results.append((0, None, [], 0, False, "deadline"))
                return
            try:
                res, payload = request(i, j)
            except Exception as e:  # noqa: BLE001 -- report, do not hide
                res, payload = (0, None, [], 0, False, f"exception {e!r}"), None
            with lock:
                results.append(res)
                if res[4]:
                    payloads[(i, j)] = payload

    t0 = time.time()
    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, deadline - time.time()) + 5)
    return results, payloads, time.time() - t0


def summarize(results, wall):
    """Stats of (status, ttft, [itl], tokens, ok, detail) results: answered, rejected, errors, latencies."""
    ok = [r for r in results if r[0] == 200 and r[4]]
    bad = [r for r in results if not (r[0] == 200 and r[4]) and r[0] != 503]
    ttft = [r[1] for r in ok if r[1] is not None]
    itl = [x for r in ok for x in r[2]]
    tokens = sum(r[3] for r in ok)
    return {
        "answered_ok": len(ok), "rejected_503": sum(1 for r in results if r[0] == 503), "errors": len(bad),
        "error_samples": [r[5] for r in bad[:3]], "wall_s": round(wall, 3), "tokens": tokens,
        "tokens_per_s": round(tokens / wall, 1),
        "ttft_p50_ms": round(1000 * pct(ttft, 50), 1), "ttft_p99_ms": round(1000 * pct(ttft, 99), 1),
        "itl_p50_ms": round(1000 * pct(itl, 50), 2), "itl_p99_ms": round(1000 * pct(itl, 99), 2),
    }


def run(host, port, clients, requests, max_tokens, deadline_s):
    deadline = time.time() + deadline_s
    results, _, wall = run_clients(
        clients, requests, lambda i, j: (one_request(host, port, i, j, max_tokens, deadline), None), deadline)
    stats = summarize(results, wall)
    return {"clients": clients, "requests": clients * requests, **stats,
            "requests_per_s": round(stats["answered_ok"] / wall, 2)}


WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa "
         "quebec romeo sierra tango uniform victor whiskey xray yankee zulu").split()


def engine_request(i, j, max_tokens):
    """(path, body, field) of client i's request j: varied, some prompts long."""
    k = (i * 7 + j) % 13
    words = " ".join(WORDS[(i + j + t) % len(WORDS)] for t in range(3 + (8 * k if k % 4 == 0 else k)))
    if j % 2 == 0:
        return ("/v1/completions", {"model": "moestream", "prompt": f"{i}.{j}: {words}", "max_tokens": max_tokens,
                                    "temperature": 0, "stream": True}, "text")
    return ("/v1/chat/completions",
            {"model": "moestream", "messages": [{"role": "user", "content": f"client {i} asks: {words}"}],
             "max_tokens": max_tokens, "temperature": 0, "stream": True,
             "chat_template_kwargs": {"enable_thinking": False}}, "content")


def stream_request(host, port, path, body, field, deadline):
    """Returns (status, ttft, [itl...], tokens, text, done)."""
    conn = http.client.HTTPConnection(host, port, timeout=max(1.0, deadline - time.time()))
    t0 = time.time()
    conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        detail = r.read()[:200]
        conn.close()
        return r.status, None, [], 0, detail.decode(errors="replace"), False
    text, ttft, last, itl, toks = "", None, None, [], 0
    events = SseEvents(r)
    for ev in events:
        if "error" in ev:
            conn.close()
            return 200, ttft, itl, toks, f"stream error {ev['error']}", False
        for c in ev.get("choices", []):
            piece = c.get("text") if field == "text" else (c.get("delta") or {}).get("content")
            if piece:
                now = time.time()
                if ttft is None:
                    ttft = now - t0
                else:
                    itl.append(now - last)
                last = now
                toks += 1
                text += piece
    done = events.done
    conn.close()
    return 200, ttft, itl, toks, text, done


def engine_run(host, port, clients, requests, max_tokens, deadline_s):
    """One load run; returns (stats, {(i, j): text})."""
    deadline = time.time() + deadline_s

    def request(i, j):
        path, body, field = engine_request(i, j, max_tokens)
        st, ttft, itl, toks, text, done = stream_request(host, port, path, body, field, deadline)
        ok = st == 200 and done
        return (st, ttft, itl, toks, ok, "" if ok else text), text

    results, texts, wall = run_clients(clients, requests, request, deadline)
    return summarize(results, wall), texts


def engine_main(a):
    tmp = tempfile.mkdtemp(prefix="moe-loadtest-")
    container = os.path.join(tmp, "model")
    subprocess.run([os.path.join(a.build, "tools/moe/moe"), "convert", f"--in={a.engine}", f"--out={container}"],
                   check=True, capture_output=True, timeout=600)
    modes = {"batched": [], "unbatched": []}
    ref, mismatches, errors = None, 0, 0
    for rep in range(a.repeats):
        for mode in ("batched", "unbatched"):
            stack = Stack(a.build, workers=a.workers, worker_bin=os.path.join(a.build, "services/inferd/inferd"),
                          worker_args=[f"--model={container}", "--log-level=warning",
                                       f"--batched-forward={'true' if mode == 'batched' else 'false'}"],
                          gateway_args=[f"--tokenizer={container}", "--max-running=256", "--max-queued=256"],
                          startup_timeout=120, expertd_model=container, expertd_budget=a.expertd_budget)
            try:
                res, texts = engine_run("127.0.0.1", stack.port, a.clients, a.requests, a.max_tokens, a.deadline)
                m = stack.metrics()
                res["steps"] = int(sum(v for k, v in m.items() if k.startswith("moe_worker_steps")))
            finally:
                stack.stop()
            if ref is None:
                ref = texts
            diff = sum(1 for k, t in texts.items() if ref.get(k, t) != t)
            res["answers_differing_from_first_run"] = diff
            mismatches += diff
            errors += res["errors"]
            res["mode"], res["repeat"] = mode, rep
            print(json.dumps(res), file=sys.stderr, flush=True)
            modes[mode].append(res)

    def summary(rs, key):
        xs = [r[key] for r in rs]
        return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}

    out = {"model": a.engine, "workers": a.workers, "clients": a.clients, "requests": a.clients * a.requests,
           "max_tokens": a.max_tokens, "repeats": a.repeats, "mismatches": mismatches, "errors": errors}
    for mode, rs in modes.items():
        out[mode] = {k: summary(rs, k) for k in ("tokens_per_s", "ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms",
                                                  "itl_p99_ms", "steps", "answered_ok")}
    ratios = [b["tokens_per_s"] / u["tokens_per_s"] for b, u in zip(modes["batched"], modes["unbatched"])
              if u["tokens_per_s"] > 0]
    out["batched_over_unbatched_tokens_per_s"] = {"median": round(statistics.median(ratios), 2),
                                                  "min": round(min(ratios), 2), "max": round(max(ratios), 2)}
    print(json.dumps(out))
    return 0 if errors == 0 and mismatches == 0 else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--url", help="existing gateway on loopback (http://127.0.0.1:PORT); default: start a stack")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--requests", type=int, default=4, help="requests per client")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--deadline", type=float, default=120.0, help="seconds; the run stops by then")
    ap.add_argument("--toy-step-us", type=int, default=2000, help="simulated step cost of the toy workers")
    ap.add_argument("--toy-row-us", type=int, default=50, help="simulated cost per fed token")
    ap.add_argument("--engine", help="model directory: load the real engine (see above) instead of the toy")
    ap.add_argument("--repeats", type=int, default=1, help="--engine: batched/unbatched pairs to run")
    ap.add_argument("--expertd-budget", default="256M", help="--engine: expertd's arena")
    a = ap.parse_args()
    if a.engine:
        if not (1 <= a.clients <= 256 and 1 <= a.requests <= 100 and 1 <= a.max_tokens <= 256 and a.repeats >= 1):
            sys.exit("clients 1..256, requests 1..100, max-tokens 1..256, repeats >= 1")
        return engine_main(a)
    if not (1 <= a.clients <= 256 and 1 <= a.requests <= 100 and 1 <= a.max_tokens <= 33):
        sys.exit("clients 1..256, requests 1..100, max-tokens 1..33 (the toy script is 44 bytes)")
    stack = None
    if a.url:
        u = urllib.parse.urlparse(a.url)
        if u.hostname not in ("127.0.0.1", "localhost", "::1"):
            sys.exit("--url must be a loopback address")
        host, port = u.hostname, u.port
    else:
        stack = Stack(a.build, workers=a.workers,
                      worker_args=[f"--toy-step-us={a.toy_step_us}", f"--toy-row-us={a.toy_row_us}"])
        host, port = "127.0.0.1", stack.port
    try:
        res = run(host, port, a.clients, a.requests, a.max_tokens, a.deadline)
    finally:
        if stack:
            stack.stop()
    res["workers"] = a.workers if not a.url else None
    print(json.dumps(res))
    return 0 if res["errors"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
