#!/usr/bin/env python3
"""The serving stack on a (full-size) container under a serving plan: expertd +
N inferd workers sharing it + the gateway, started the way deploy starts them.

Measures, in one run:
  - start-up: seconds until expertd, all workers and the gateway were ready;
  - memory: RSS and PSS (anon / file / shmem) of every process from
    /proc/PID/smaps_rollup after start-up and after the requests, and the
    lowest MemAvailable seen while it ran (sampled every 0.2 s);
  - decode: one greedy request (wall time, completion tokens), then one
    request per worker at once (their answers must equal the lone one's);
  - refusal: a request longer than the plan's context is answered 4xx naming
    the cause, in well under a token's time (before any work).
Prints one JSON object (and writes it with --out).

  tools/bench/full_size_stack.py --build build --model /path/glm5-q8 --plan two.json \
      --prompt-ids 1,2,3 --max-tokens 3

Run it under /work/bin/quiet (docs/BENCHMARKS.md, "Full-size GLM-5"). Traffic
stays on loopback and unix sockets in a temp directory; every process started
is stopped at the end.
"""
import argparse
import concurrent.futures
import json
import os
import signal
import sys
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "serving"))
from stack import Stack  # noqa: E402


def smaps_rollup(pid):
    out = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3 and parts[-1] == "kB":
                    out[parts[0].rstrip(":")] = int(parts[1]) * 1024
    except OSError:
        return None
    keep = ("Rss", "Pss", "Pss_Anon", "Pss_File", "Pss_Shmem", "Shared_Clean", "Private_Dirty")
    return {k: out.get(k, 0) for k in keep}


def mem_available():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


class MemWatch(threading.Thread):
    def __init__(self):
        super().__init__(daemon=True)
        self.low = mem_available()
        self.stop_ = threading.Event()

    def run(self):
        while not self.stop_.is_set():
            self.low = min(self.low, mem_available())
            time.sleep(0.2)


def post(base, body, timeout):
    req = urllib.request.Request(base + "/v1/completions", data=json.dumps(dict(body, model="moestream")).encode(),
                                 headers={"Content-Type": "application/json"})
    t = time.time()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            j = json.loads(r.read())
        c = j["choices"][0]
        return {"status": 200, "seconds": time.time() - t, "text": c["text"], "finish_reason": c["finish_reason"],
                "completion_tokens": j["usage"]["completion_tokens"]}
    except urllib.error.HTTPError as e:
        return {"status": e.code, "seconds": time.time() - t, "error": e.read().decode(errors="replace")}
    except OSError as e:  # timed out or the connection failed: recorded, the run goes on to stop the stack
        return {"status": None, "seconds": time.time() - t, "error": repr(e)}


def memory(st):
    return {name: smaps_rollup(pid) for name, pid in st.pids().items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--model", required=True, help="converted container")
    ap.add_argument("--plan", required=True, help="moe plan --workers N --expertd --out FILE")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--prompt-ids", default="1,2,3")
    ap.add_argument("--max-tokens", type=int, default=3)
    ap.add_argument("--startup-timeout", type=float, default=300)
    ap.add_argument("--request-timeout", type=float, default=400)
    ap.add_argument("--out")
    a = ap.parse_args()
    # A SIGTERM (e.g. from `timeout`) stops the stack too: SystemExit runs the finally below and atexit.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with open(a.plan) as f:
        plan = json.load(f)
    context = plan["kv"]["context"]
    prompt = [int(x) for x in a.prompt_ids.split(",")]
    res = {"model": a.model, "plan": a.plan, "workers": a.workers, "context": context, "prompt_ids": prompt,
           "max_tokens": a.max_tokens, "mem_available_before": mem_available()}
    watch = MemWatch()
    watch.start()
    t0 = time.time()
    st = Stack(a.build, workers=a.workers, worker_bin=os.path.join(a.build, "services/inferd/inferd"),
               worker_args=[f"--model={a.model}", f"--plan={a.plan}", "--log-level=warning"],
               gateway_args=[f"--tokenizer={a.model}"], expertd_model=a.model, expertd_budget=None,
               expertd_args=[f"--plan={a.plan}"], startup_timeout=a.startup_timeout)
    try:
        res["startup_s"] = dict(st.ready_s, total=time.time() - t0)
        res["memory_after_start"] = memory(st)
        body = {"prompt": prompt, "max_tokens": a.max_tokens, "temperature": 0}
        res["lone"] = post(st.base_url, body, a.request_timeout)
        res["memory_after_lone"] = memory(st)
        with concurrent.futures.ThreadPoolExecutor(max_workers=a.workers) as ex:
            t = time.time()
            res["together"] = [f.result() for f in [ex.submit(post, st.base_url, body, a.request_timeout)
                                                    for _ in range(a.workers)]]
            res["together_wall_s"] = time.time() - t
        res["memory_after_together"] = memory(st)
        res["answers_equal"] = all(r.get("text") == res["lone"].get("text") for r in res["together"])
        # Longer than the plan's context: refused before any work.
        res["over_context"] = post(st.base_url, {"prompt": [1] * (context + 1), "max_tokens": 1, "temperature": 0},
                                   a.request_timeout)
    finally:
        res["exit_codes"] = st.stop()
        watch.stop_.set()
        watch.join()
    res["mem_available_low"] = watch.low
    text = json.dumps(res, indent=1, sort_keys=True)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    ok = (res["lone"]["status"] == 200 and all(r["status"] == 200 for r in res["together"]) and
          res["answers_equal"] and 400 <= (res["over_context"]["status"] or 0) < 500)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
