#!/usr/bin/env python3
"""Decode tokens/s with and without a JSON schema through the real stack (inferd over the
engine + the gateway with the model's tokenizer), in the same run, alternating.

The model (default models/glm-tiny-chat, the demo model) is converted to a container once;
one stack serves every run. Each round sends C concurrent streaming chat requests twice:
  free:   no constraint, ignore_eos, max_tokens = the length the schema run produced
  schema: response_format json_schema (8 required fields: strings, integers, booleans,
          enums), the same prompt, temperature 0
Decode tokens/s of a request = (tokens - 1) / (time of its last token - time of its first):
prefill and the first token are left out, so the figure is the per-token cost of decode
steps (model step + the constraint's mask, sample, accept). Reported: median over all
requests of all --repeats rounds, with min..max, and the ratio schema/free per C.
Every schema answer must parse as JSON with all 8 fields, else the run fails.

  tools/serving/structured_decode_bench.py --build build --concurrency 1,8 --repeats 3
"""
import argparse
import concurrent.futures
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from sse import SseEvents, choice_text  # noqa: E402
from stack import Stack  # noqa: E402


def wide_schema():
    props = {}
    for i in range(8):
        k = f"field_{i}"
        props[k] = [{"type": "string", "maxLength": 10}, {"type": "integer", "minimum": 0, "maximum": 1000},
                    {"type": "boolean"}, {"enum": ["x", "y", "z"]}][i % 4]
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


def stream(port, body):
    """Returns (text, token times)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:300]}")
    text, times, usage = "", [], None
    for j in SseEvents(r):
        if j.get("usage"):
            usage = j["usage"]
        for c in j.get("choices", []):
            piece = choice_text(c)
            if piece:
                text += piece
                times.append(time.perf_counter())
    conn.close()
    return text, times, usage["completion_tokens"] if usage else None


def decode_tps(times, tokens):
    if tokens is None or tokens < 3 or len(times) < 2 or times[-1] <= times[0]:
        return None
    # Chunks may hold several tokens; the first chunk's time stands for the first token.
    return (tokens - 1) / (times[-1] - times[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--model", default="models/glm-tiny-chat")
    ap.add_argument("--concurrency", default="1,8")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="moe-structured-bench-")
    container = os.path.join(tmp, "model")
    subprocess.run([os.path.join(a.build, "tools/moe/moe"), "convert", f"--in={a.model}", f"--out={container}"],
                   check=True, capture_output=True, timeout=600)
    stack = Stack(a.build, workers=1, worker_bin=os.path.join(a.build, "services/inferd/inferd"),
                  worker_args=[f"--model={container}", "--log-level=warning"],
                  gateway_args=[f"--tokenizer={container}", "--max-running=256", "--max-queued=256"],
                  startup_timeout=120)
    schema = wide_schema()
    base = {"model": "moestream", "temperature": 0, "stream": True, "stream_options": {"include_usage": True},
            "chat_template_kwargs": {"enable_thinking": False}}
    results = {}
    try:
        for c in [int(x) for x in a.concurrency.split(",")]:
            rows = {"free": [], "schema": []}
            lengths = []
            for rep in range(a.repeats):
                msgs = [[{"role": "user", "content": f"Fill in the form, please ({rep}.{i})."}] for i in range(c)]
                sbody = [dict(base, messages=m, max_tokens=1024,
                              response_format={"type": "json_schema",
                                               "json_schema": {"name": "form", "schema": schema, "strict": True}})
                         for m in msgs]
                with concurrent.futures.ThreadPoolExecutor(max_workers=c) as ex:
                    got = list(ex.map(lambda b: stream(stack.port, b), sbody))
                for text, times, n in got:
                    obj = json.loads(text)
                    if sorted(obj) != sorted(schema["properties"]):
                        raise RuntimeError(f"schema answer lacks fields: {text[:200]}")
                    lengths.append(n)
                    rows["schema"].append(decode_tps(times, n))
                fbody = [dict(base, messages=m, max_tokens=n, ignore_eos=True) for m, (_, _, n) in zip(msgs, got)]
                with concurrent.futures.ThreadPoolExecutor(max_workers=c) as ex:
                    for text, times, n in ex.map(lambda b: stream(stack.port, b), fbody):
                        rows["free"].append(decode_tps(times, n))
            res = {}
            for k, v in rows.items():
                v = [x for x in v if x is not None]
                res[k] = {"median": statistics.median(v), "min": min(v), "max": max(v), "n": len(v)}
            res["ratio_schema_over_free"] = res["schema"]["median"] / res["free"]["median"]
            res["schema_output_tokens_median"] = statistics.median(lengths)
            results[c] = res
            if not a.json:
                print(f"C={c}: free {res['free']['median']:.1f} tok/s ({res['free']['min']:.1f}..{res['free']['max']:.1f}), "
                      f"schema {res['schema']['median']:.1f} tok/s ({res['schema']['min']:.1f}..{res['schema']['max']:.1f}), "
                      f"ratio {res['ratio_schema_over_free']:.3f}, schema output {res['schema_output_tokens_median']} tokens, "
                      f"{res['free']['n']} requests each", flush=True)
    finally:
        stack.stop()
        subprocess.run(["rm", "-rf", tmp])
    if a.json:
        print(json.dumps({"model": a.model, "per_concurrency": results}))


if __name__ == "__main__":
    main()
