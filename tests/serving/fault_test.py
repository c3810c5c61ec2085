"""Faults under load on the deployed shape (expertd + 2 inferd over a converted container +
the gateway): expertd or a worker killed while streams run, with a cold cache (expertd
gone before anything was read) and a warm one. Every request ends within seconds, as an
answer or a clean JSON error (an SSE error event then [DONE] on streams), /health tells
the truth (503, naming expertd), and the stack recovers when the process is started again
(as deploy/respawn.sh and the systemd units do): same greedy answers as before.

Usage: fault_test.py BUILD_DIR SOURCE_DIR
"""
import concurrent.futures
import http.client
import json
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools", "serving"))
from stack import Stack, convert_container  # noqa: E402

BUILD = sys.argv.pop(1) if len(sys.argv) > 1 else "build"
SOURCE = sys.argv.pop(1) if len(sys.argv) > 1 else "."
MODEL_SRC = os.path.join(SOURCE, "models", "tiny-glm-random")
GREEDY = {"prompt": "Hello there, how are", "max_tokens": 8, "temperature": 0}
# Long enough to be running when the fault comes (the tiny model makes ~10-50 tokens/s here).
LONG = {"prompt": "One two three four five six seven", "max_tokens": 400, "temperature": 0.8, "seed": 1,
        "stream": True}


def request(port, path, body, timeout=30):
    """Returns (status, headers, parsed body or SSE events, seconds)."""
    t0 = time.time()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("POST", path, body=json.dumps(dict(body, model="moestream")),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    raw = r.read().decode("utf-8", "replace")
    c.close()
    if r.getheader("Content-Type", "").startswith("text/event-stream"):
        events = [ln[6:] for ln in raw.split("\n") if ln.startswith("data: ")]
        return r.status, dict(r.getheaders()), events, time.time() - t0
    return r.status, dict(r.getheaders()), json.loads(raw), time.time() - t0


def health(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    c.request("GET", "/health")
    r = c.getresponse()
    body = json.loads(r.read())
    c.close()
    return r.status, body


def wait_for(pred, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return time.time()
        time.sleep(0.05)
    raise AssertionError(f"{what} did not happen within {timeout} s")


def kill_under_load(stack, name, streams):
    """`streams` long streams, then `name` killed while they run; returns (results, kill time,
    time the last one ended)."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=streams) as ex:
        futs = [ex.submit(request, stack.port, "/v1/completions", dict(LONG, seed=i), 60) for i in range(streams)]
        time.sleep(1.0)
        stack.kill(name)
        t_kill = time.time()
        results = [f.result(timeout=60) for f in futs]
    return results, t_kill, time.time()


class Faults(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp, cls.container = convert_container(BUILD, MODEL_SRC, "moe-fault-")

    def stack(self):
        return Stack(BUILD, workers=2, worker_bin=os.path.join(BUILD, "services/inferd/inferd"),
                     worker_args=[f"--model={self.container}", "--log-level=warning"],
                     gateway_args=[f"--tokenizer={self.container}", "--sse-keepalive-s=0.5"],
                     startup_timeout=60, expertd_model=self.container)

    def assert_clean_stream_or_error(self, result, limit_s):
        status, headers, body, took = result
        self.assertLess(took, limit_s, f"took {took:.1f} s")
        if status == 200 and isinstance(body, list):
            self.assertEqual(body[-1], "[DONE]", body[-3:])
            for e in body[:-1]:
                json.loads(e)  # every event is JSON (an error event included)
            return "error" in json.loads(body[-2]) if len(body) > 1 else False
        self.assertIn(status, (500, 503), body)
        self.assertIn("error", body)
        if status == 503:
            self.assertIn("Retry-After", headers)
        return True

    def test_expertd_killed_cold_then_warm_and_recovery(self):
        s = self.stack()
        try:
            port = s.port
            # Cold: expertd dies before anything was read. Requests fail fast with a clean
            # 503 and /health says why.
            s.kill("expertd")
            t_kill = time.time()
            r = request(port, "/v1/completions", GREEDY)
            self.assertTrue(self.assert_clean_stream_or_error(r, 10))
            wait_for(lambda: health(port)[0] == 503, 5, "/health turning 503")
            self.assertLess(time.time() - t_kill, 10)
            st, h = health(port)
            self.assertEqual(h["status"], "unavailable")
            self.assertTrue(all(not w["alive"] and "expertd" in w["error"] for w in h["worker_status"]), h)
            r = request(port, "/v1/completions", dict(GREEDY, stream=True))
            self.assertEqual(r[0], 503, r)  # a stream no worker can take is a 503, not a 200 SSE error
            self.assertLess(r[3], 2.0)
            # Recovery: expertd back, the workers re-attach, the same answers.
            s.restart("expertd")
            wait_for(lambda: health(port)[0] == 200 and health(port)[1]["workers_alive"] == 2, 20,
                     "both workers back in rotation")
            ref = request(port, "/v1/completions", GREEDY)
            self.assertEqual(ref[0], 200, ref)

            # Warm, under load: streams running when expertd is killed end within seconds
            # (finished from resident experts, or with an error event then [DONE]).
            results, t_kill, ended = kill_under_load(s, "expertd", 4)
            for r in results:
                self.assert_clean_stream_or_error(r, 60)
            self.assertLess(ended - t_kill, 15, "streams hung after expertd died")
            wait_for(lambda: health(port)[0] == 503, 5, "/health turning 503 (warm)")
            s.restart("expertd")
            wait_for(lambda: health(port)[0] == 200 and health(port)[1]["workers_alive"] == 2, 20,
                     "both workers back in rotation (warm)")
            again = request(port, "/v1/completions", GREEDY)
            self.assertEqual(again[0], 200, again)
            self.assertEqual(again[2]["choices"][0]["text"], ref[2]["choices"][0]["text"])
        finally:
            codes = s.stop()
        self.assertEqual(codes.get("gateway"), 0, codes)

    def test_worker_killed_under_load_and_recovery(self):
        s = self.stack()
        try:
            port = s.port
            ref = request(port, "/v1/completions", GREEDY)
            self.assertEqual(ref[0], 200, ref)
            results, t_kill, _ = kill_under_load(s, "inferd0", 6)
            for r in results:
                self.assert_clean_stream_or_error(r, 60)
            # New requests go to the live worker at once.
            r = request(port, "/v1/completions", GREEDY)
            self.assertEqual(r[0], 200, r)
            self.assertEqual(r[2]["choices"][0]["text"], ref[2]["choices"][0]["text"])
            self.assertLess(time.time() - t_kill, 60)
            st, h = health(port)
            self.assertEqual(h["workers_alive"], 1, h)
            s.restart("inferd0")
            wait_for(lambda: health(port)[1]["workers_alive"] == 2, 30, "the restarted worker back in rotation")
        finally:
            codes = s.stop()
        self.assertEqual(codes.get("gateway"), 0, codes)


if __name__ == "__main__":
    unittest.main(verbosity=2)
