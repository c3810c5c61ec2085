"""The stack as it is deployed, on the real engine: expertd + 2 inferd workers
(the `inferd` binary over a converted container, routed experts from the shared
expertd) + the gateway with the model's tokenizer. Loopback/unix sockets only.

  - Every answer is identical to the same request served by one inferd with
    its in-process expert store (greedy and seeded sampling, chat and
    completions, requests sent concurrently so the workers batch them), the
    expertd workers speculating (--speculative mtp) and the lone one not;
    usage.completion_tokens_details and the workers' speculation metrics
    report the drafts.
  - expertd really served both workers (two sessions, reads/hits counted).
  - `moe run` with --seed/--temperature/--top-p samples the same tokens as the
    API with the same parameters (one sampler, common/sampling).
  - The gateway refuses to start with a tokenizer larger than the model's
    vocabulary, naming both numbers.

Usage: engine_stack_test.py BUILD_DIR SOURCE_DIR
"""
import concurrent.futures
import json
import os
import subprocess
import sys
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools", "serving"))
from stack import Stack, convert_container  # noqa: E402

BUILD = sys.argv.pop(1) if len(sys.argv) > 1 else "build"
SOURCE = sys.argv.pop(1) if len(sys.argv) > 1 else "."
MODEL_SRC = os.path.join(SOURCE, "models", "tiny-glm-random")

REQUESTS = [
    ("/v1/completions", {"prompt": "Hello there, how are", "max_tokens": 12, "temperature": 0}),
    ("/v1/completions", {"prompt": "One two three four five six seven eight nine ten eleven twelve thirteen "
                                   "fourteen fifteen sixteen", "max_tokens": 10, "temperature": 0}),
    ("/v1/completions", {"prompt": "Seeded", "max_tokens": 10, "temperature": 0.9, "top_p": 0.95, "seed": 7,
                         "n": 2}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 10,
                              "temperature": 0, "chat_template_kwargs": {"enable_thinking": False}}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Count to five, please."}],
                              "max_tokens": 14, "temperature": 0.7, "seed": 3}),
    ("/v1/completions", {"prompt": "x", "max_tokens": 6, "temperature": 0, "logprobs": 2}),
]


def post(base, path, body):
    body = dict(body, model="moestream")
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        j = json.loads(r.read())
    out = []
    for c in sorted(j["choices"], key=lambda c: c["index"]):
        if "message" in c:
            out.append((c["message"].get("content"), c["message"].get("reasoning_content"), c["finish_reason"]))
        else:
            out.append((c["text"], json.dumps(c.get("logprobs"), sort_keys=True), c["finish_reason"]))
    return out, j["usage"]["completion_tokens"]


class EngineStack(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp, cls.container = convert_container(BUILD, MODEL_SRC, "moe-engine-stack-")

    def engine_stack(self, extra_worker_args=(), **kw):
        return Stack(BUILD, worker_bin=os.path.join(BUILD, "services/inferd/inferd"),
                     worker_args=[f"--model={self.container}", "--log-level=warning", *extra_worker_args],
                     gateway_args=[f"--tokenizer={self.container}"], startup_timeout=60, **kw)

    def test_expertd_stack_answers_exactly_like_in_process(self):
        alone = self.engine_stack(workers=1, extra_worker_args=["--speculative=off"])  # plain decode: the reference
        try:
            ref = [post(alone.base_url, p, b) for p, b in REQUESTS]
        finally:
            codes = alone.stop()
        self.assertTrue(all(c == 0 for c in codes.values()), codes)
        for out, n in ref:
            self.assertGreater(n, 0)

        stack = self.engine_stack(workers=2, expertd_model=self.container,
                                  extra_worker_args=["--speculative=mtp", "--draft-tokens=3"])
        try:
            # Concurrently, twice over: both workers get requests, each batches several.
            with concurrent.futures.ThreadPoolExecutor(max_workers=len(REQUESTS) * 2) as ex:
                futs = [ex.submit(post, stack.base_url, p, b) for p, b in REQUESTS * 2]
                got = [f.result() for f in futs]
            self.assertEqual(got, ref * 2)
            heat = subprocess.run([os.path.join(BUILD, "tools/moe/moe"), "heat", f"--expertd={stack.expertd_sock}",
                                   "--json"], check=True, capture_output=True, text=True, timeout=30)
            st = json.loads(heat.stdout)
            self.assertEqual(st["sessions"], 2, st)
            self.assertGreater(st["requests"] + st["shm_hits"], 0, st)
            time.sleep(0.5)  # a health probe (every 100 ms) after the last request refreshes worker stats
            m = stack.metrics()
            served = [v for k, v in m.items() if k.startswith("moe_worker_tokens_total")]
            self.assertEqual(len(served), 2, m)
            self.assertTrue(all(v > 0 for v in served), m)  # both workers answered
            fetches = [v for k, v in m.items() if k.startswith("moe_worker_expert_fetches")]
            self.assertEqual(len(fetches), 2, m)
            self.assertTrue(all(v > 0 for v in fetches), m)
            drafted = [v for k, v in m.items() if k.startswith("moe_worker_spec_drafted_total")]
            self.assertEqual(len(drafted), 2, m)
            self.assertTrue(all(v > 0 for v in drafted), m)  # both workers verified MTP drafts
            # The verify cost: loop time and tokens of verify steps (and of plain ones, where there were).
            for name in ("moe_worker_spec_verify_step_seconds_total", "moe_worker_spec_verify_step_tokens_total"):
                got_v = [v for k, v in m.items() if k.startswith(name)]
                self.assertEqual(len(got_v), 2, (name, m))
                self.assertTrue(all(v > 0 for v in got_v), (name, m))
            self.assertEqual(len([k for k in m if k.startswith("moe_worker_spec_guard_blocks_total")]), 2, m)
            # The drafts a request's verifies accepted / rejected, in OpenAI's usage fields.
            body = dict(REQUESTS[1][1], model="moestream")
            req = urllib.request.Request(stack.base_url + "/v1/completions", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=60) as r:
                details = json.loads(r.read())["usage"]["completion_tokens_details"]
            self.assertGreater(details["accepted_prediction_tokens"] + details["rejected_prediction_tokens"], 0,
                               details)
        finally:
            codes = stack.stop()
        self.assertTrue(all(c == 0 for c in codes.values()), codes)

    def test_moe_run_and_the_api_sample_the_same_tokens(self):
        """One sampler (common/sampling): `moe run --seed S --temperature T --top-p P` and the API with the
        same parameters give the same tokens (completion text and count), for several (S, T, P); a
        different seed gives other tokens (the seed acts)."""
        prompt = "Once upon a time there was"
        cases = [(7, 0.9, 0.95), (123, 1.3, 0.8), (5, 0.7, 1.0), (8, 0.9, 0.95)]
        stack = self.engine_stack(workers=1)
        try:
            api = []
            for seed, t, p in cases:
                body = {"prompt": prompt, "max_tokens": 12, "temperature": t, "top_p": p, "seed": seed}
                out, n = post(stack.base_url, "/v1/completions", body)
                api.append((out[0][0], n))
        finally:
            codes = stack.stop()
        self.assertTrue(all(c == 0 for c in codes.values()), codes)
        for (seed, t, p), (text, n) in zip(cases, api):
            r = subprocess.run([os.path.join(BUILD, "tools/moe/moe"), "run", f"--model={self.container}",
                                f"--prompt={prompt}", "--max-tokens=12",
                                f"--temperature={t}", f"--top-p={p}", f"--seed={seed}", "--json"],
                               capture_output=True, text=True, timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)
            cli = json.loads(r.stdout)
            self.assertEqual((cli["text"], len(cli["tokens"])), (text, n), (seed, t, p))
        self.assertNotEqual(api[0], api[3])  # seeds 7 and 8, same parameters

    def test_gateway_refuses_a_tokenizer_larger_than_the_model(self):
        # inferd_toy serves a 257-id byte vocabulary; the project tokenizer has 12,288 ids.
        toy = os.path.join(BUILD, "tests/inferd/inferd_toy")
        sock = os.path.join(self.tmp, "toy.sock")
        w = subprocess.Popen([toy, f"--listen=unix:{sock}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
        try:
            g = subprocess.run([os.path.join(BUILD, "services/gateway/gateway"), f"--worker=unix:{sock}",
                                "--listen=127.0.0.1:0", f"--tokenizer={MODEL_SRC}", "--startup-wait-s=20"],
                               capture_output=True, text=True, timeout=60)
        finally:
            w.terminate()
            w.wait(timeout=10)
        self.assertEqual(g.returncode, 1, g.stderr)
        self.assertIn("12288", g.stderr)
        self.assertIn("257", g.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
