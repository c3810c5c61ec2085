"""The prefix cache's disk tier through the whole stack (inferd on the real engine over the
tiny random checkpoint + the gateway with its tokenizer), across restarts:

  - a stack started on a --prefix-cache-dir answers a greedy request and leaves its KV there;
    a stack started again (new processes) answers the same request identically and says so in
    usage.prompt_tokens_details.cached_tokens (all of the prompt but its last token), and a
    returning conversation (the answer appended, one more user turn) reuses the whole first turn;
  - two workers of the same model share the directory: the second worker answers from a file
    the first one wrote;
  - a worker of another model identity (another --kv-dtype) on the same directory reuses
    nothing;
  - a damaged file is ignored with a warning naming it and the cause; the answer is the same.

Usage: prefix_disk_test.py BUILD_DIR SOURCE_DIR
"""
import glob
import json
import os
import shutil
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools", "serving"))
from stack import Stack  # noqa: E402

BUILD = sys.argv.pop(1) if len(sys.argv) > 1 else "build"
SOURCE = sys.argv.pop(1) if len(sys.argv) > 1 else "."
MODEL = os.path.join(SOURCE, "models", "tiny-glm-random")
PROMPT = ("You are a careful assistant. The user asks about the weather in Paris, Lyon and Marseille, "
          "and wants the answer as a short list with one line per city.")


def post(base, body):
    req = urllib.request.Request(base + "/v1/completions", data=json.dumps(dict(body, model="moestream")).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        j = json.loads(r.read())
    return j["choices"][0]["text"], j["usage"]


def health(base):
    try:
        with urllib.request.urlopen(base + "/health", timeout=5) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        return json.loads(e.read())


def wait_for(pred, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what} did not happen within {timeout} s")


class PrefixDiskTier(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="moe-prefix-disk-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def stack(self, workers=1, extra=()):
        return Stack(BUILD, workers=workers, worker_bin=os.path.join(BUILD, "services/inferd/inferd"),
                     worker_args=[f"--model={MODEL}", f"--prefix-cache-dir={self.dir}",
                                  "--prefix-cache-disk-bytes=256M", "--log-level=warning", *extra],
                     gateway_args=[f"--tokenizer={MODEL}"], startup_timeout=60)

    def run_one(self, body, workers=1, extra=()):
        s = self.stack(workers, extra)
        try:
            out = post(s.base_url, body)
            logs = s.log_tail(20000)
        finally:
            codes = s.stop()
        self.assertTrue(all(c == 0 for c in codes.values()), codes)
        return out, logs

    def files(self):
        return sorted(glob.glob(os.path.join(self.dir, "*.kvp")))

    def test_a_restarted_stack_reuses_the_disk_tier(self):
        body = {"prompt": PROMPT, "max_tokens": 12, "temperature": 0}
        (cold, u0), _ = self.run_one(body)
        self.assertEqual(u0["prompt_tokens_details"]["cached_tokens"], 0)
        self.assertEqual(len(self.files()), 1, os.listdir(self.dir))
        (warm, u1), _ = self.run_one(body)
        self.assertEqual(warm, cold)
        self.assertEqual(u1["prompt_tokens_details"]["cached_tokens"], u1["prompt_tokens"] - 1, u1)
        # The returning conversation: the first turn, its answer, a new question.
        turn2 = {"prompt": PROMPT + cold + " And in Nice?", "max_tokens": 8, "temperature": 0}
        (cold2, _), _ = self.run_one(dict(turn2, prompt=turn2["prompt"]), extra=["--prefix-cache-bytes=0"])
        (again2, u2), _ = self.run_one(turn2)
        self.assertEqual(again2, cold2)
        self.assertGreaterEqual(u2["prompt_tokens_details"]["cached_tokens"], u0["prompt_tokens"], u2)

    def test_two_workers_share_the_directory_and_another_model_does_not(self):
        body = {"prompt": PROMPT, "max_tokens": 10, "temperature": 0}
        s = self.stack(workers=2)
        try:
            first, u0 = post(s.base_url, body)
            self.assertEqual(u0["prompt_tokens_details"]["cached_tokens"], 0)
            # The worker that answered is killed once its spill is on disk; the other one
            # answers from the file the first one wrote (its own RAM cache has nothing).
            wait_for(lambda: len(self.files()) == 1, 20, "the spill file")
            time.sleep(0.5)  # a health probe (every 100 ms) refreshes the worker stats
            served = [k for k, v in s.metrics().items() if k.startswith("moe_worker_tokens_total") and v > 0]
            self.assertEqual(len(served), 1, served)
            victim = 0 if 'w0"' in served[0] or "inferd0" in served[0] else 1
            s.kill_worker(victim)
            wait_for(lambda: health(s.base_url)["workers_alive"] == 1, 20, "the killed worker out of rotation")
            got, u1 = post(s.base_url, body)
        finally:
            s.stop()
        self.assertEqual(got, first)
        self.assertEqual(u1["prompt_tokens_details"]["cached_tokens"], u1["prompt_tokens"] - 1, u1)
        (other, u2), _ = self.run_one(body, extra=["--kv-dtype=bf16"])
        self.assertEqual(u2["prompt_tokens_details"]["cached_tokens"], 0, u2)

    def test_a_damaged_file_is_ignored_with_a_warning(self):
        body = {"prompt": PROMPT, "max_tokens": 12, "temperature": 0}
        (cold, _), _ = self.run_one(body)
        [path] = self.files()
        with open(path, "r+b") as f:
            f.seek(-20, os.SEEK_END)
            b = f.read(1)
            f.seek(-20, os.SEEK_END)
            f.write(bytes([b[0] ^ 0x10]))
        (warm, u), logs = self.run_one(body)
        self.assertEqual(warm, cold)
        self.assertEqual(u["prompt_tokens_details"]["cached_tokens"], 0, u)
        self.assertIn(f"ignoring {path}: payload checksum mismatch", logs)


if __name__ == "__main__":
    unittest.main(verbosity=2)
