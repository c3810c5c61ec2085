"""A CI-sized model with GLM-5's real widths end to end: moe synth -> moe convert -> moe plan -> moe run ->
the stack (expertd + 2 inferd sharing one cache + gateway), all under serving plans.

The model is the glm-5 release config cut to 2 layers (dense layer 0, MoE layer 1) + the MTP layer, 8 routed
experts (top-4) and a 16,384-token vocabulary; every width is GLM-5's (hidden 6144, 64 heads, q/kv LoRA
2048/512, heads 192+64/256, indexer 32 x 128, dense MLP 12288, experts 2048). Layer 1's experts get bytes,
the MTP layer's stay file holes (and stay holes through the conversion). It checks:
  - synth writes FP8 with block scales and the release's shard/index layout; convert keeps the holes;
  - the plans place the model, refuse a budget that cannot hold it (naming the part) and a request longer
    than the planned context (before any work);
  - greedy tokens are identical across expert-cache budgets (all experts cached / one layer's worth, evicting
    every layer), in-process vs expertd, prefetch on and off, and one worker vs two sharing expertd;
  - moe run --json reports where the time goes (the breakdown's parts add up to the whole).

Usage: full_width_test.py BUILD_DIR SOURCE_DIR
"""
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools", "serving"))
from stack import Stack  # noqa: E402

BUILD = sys.argv.pop(1) if len(sys.argv) > 1 else "build"
SOURCE = sys.argv.pop(1) if len(sys.argv) > 1 else "."
MOE = os.path.join(BUILD, "tools/moe/moe")
TOKENIZER = os.path.join(SOURCE, "models", "tiny-glm-random")

SETS = ["num_hidden_layers=2", "first_k_dense_replace=1", "n_routed_experts=8", "num_experts_per_tok=4",
        "vocab_size=16384", "eos_token_id=[12256,12263,12265]", "pad_token_id=12256"]
PROMPT_IDS = "11,503,2048,77,9000,314,1500,42"
BANDWIDTH = ["--mem-gbps=10", "--disk-gbps=1"]  # given: the plans do not depend on this machine's load


def moe(*args, check=True, timeout=180):
    r = subprocess.run([MOE, *args], capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"moe {' '.join(args)} failed ({r.returncode}):\n{r.stderr}")
    return r


def disk_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            total += os.stat(os.path.join(root, f)).st_blocks * 512
    return total


def apparent_bytes(path):
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(path) for f in fs)


def post(base, body):
    req = urllib.request.Request(base + "/v1/completions", data=json.dumps(dict(body, model="moestream")).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            j = json.loads(r.read())
    except urllib.error.HTTPError as e:
        raise AssertionError(f"{body}: HTTP {e.code}: {e.read().decode(errors='replace')}") from None
    c = j["choices"][0]
    return c["text"], json.dumps(c.get("logprobs"), sort_keys=True), c["finish_reason"], j["usage"]["completion_tokens"]


class FullWidth(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="moe-full-width-")
        cls.ckpt = os.path.join(cls.tmp, "ckpt")
        cls.container = os.path.join(cls.tmp, "container")
        args = ["synth", "--config=glm-5", f"--out={cls.ckpt}", "--real-expert-layers=1",
                f"--tokenizer={TOKENIZER}", "--json"] + [f"--set={s}" for s in SETS]
        cls.synth = json.loads(moe(*args).stdout)
        cls.ckpt_disk = disk_bytes(cls.ckpt)
        cls.convert = json.loads(moe("convert", f"--in={cls.ckpt}", f"--out={cls.container}", "--delete-source",
                                     "--json").stdout)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def plan(self, name, *args):
        path = os.path.join(self.tmp, name)
        moe("plan", f"--model={self.container}", *BANDWIDTH, f"--out={path}", *args)
        with open(path) as f:
            return path, json.load(f)

    def run_ids(self, *args):
        r = moe("run", f"--model={self.container}", f"--prompt-ids={PROMPT_IDS}", "--max-tokens=6", "--json", *args)
        return json.loads(r.stdout)

    def test_synth_and_convert_keep_the_real_layout_and_the_holes(self):
        s = self.synth
        self.assertEqual(s["kind"], "checkpoint")
        self.assertGreater(s["fp8_tensors"], 40)
        self.assertEqual(s["unmatched_exclusions"], 3)  # indexers_proj of layers 0, 1 and MTP 2
        self.assertLess(s["written_bytes"], s["total_bytes"])  # the MTP layer's experts are holes
        self.assertLess(self.ckpt_disk, s["total_bytes"] - 8 * 3 * 2048 * 6144 * 9 // 10)
        with open(os.path.join(self.ckpt, "model.safetensors.index.json")) as f:
            index = json.load(f)
        self.assertEqual(index["metadata"]["total_size"], s["total_bytes"])
        self.assertIn("model.layers.1.mlp.experts.7.down_proj.weight_scale_inv", index["weight_map"])
        c = self.convert
        self.assertTrue(c["complete"])
        self.assertEqual(sum(x["records"] for x in c["shards"]), 16)
        self.assertEqual(sum(x["zero_records"] for x in c["shards"]), 8)
        self.assertLess(disk_bytes(self.container) + 8 * 20_000_000, apparent_bytes(self.container))

    def test_plans_place_and_refuse_by_name(self):
        _, p = self.plan("one.json", "--ram=3G")
        self.assertEqual(p["model"]["policy"].split(",")[0], "experts=q4_g64")
        self.assertGreater(p["resident"]["by_role"]["attention"]["bytes"], 300_000_000)
        self.assertFalse(p["request"]["expertd"])
        self.assertGreaterEqual(p["expert_cache"]["bytes"], p["expert_cache"]["min_bytes"])
        r = moe("plan", f"--model={self.container}", "--ram=600M", *BANDWIDTH, check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("does not fit in", r.stderr)
        self.assertIn("the resident weights take", r.stderr)
        self.assertIn("attention", r.stderr)
        # A request longer than the planned context is refused before any work.
        short, _ = self.plan("short.json", "--ram=3G", "--context=10")
        r = moe("run", f"--model={self.container}", f"--plan={short}", f"--prompt-ids={PROMPT_IDS}",
                "--max-tokens=8", check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("the request needs 16 tokens of context", r.stderr)
        self.assertIn("gives each worker 10", r.stderr)

    def test_greedy_tokens_do_not_depend_on_placement(self):
        one, p = self.plan("run.json", "--ram=3G")
        ref = self.run_ids(f"--plan={one}")
        toks = ref["tokens"]
        self.assertEqual(len(toks), 6)
        # Where the time went: the parts add up to the whole.
        b = ref["breakdown"]["decode_per_token"]
        parts = sum(b[k] for k in ("embed_ms", "attention_ms", "attention_core_ms", "indexer_ms", "router_ms", "shared_expert_ms",
                                   "dense_mlp_ms", "routed_experts_ms", "expert_fetch_ms", "lm_head_ms",
                                   "other_ms"))
        self.assertAlmostEqual(parts, b["total_ms"], delta=1e-6 * b["total_ms"] + 1e-9)
        self.assertGreater(b["attention_ms"], 0)
        self.assertGreater(b["attention_core_ms"], 0)
        self.assertEqual(b["forwards"], 5)
        # One layer's experts at most (4 of 8): every layer evicts; the tokens stay.
        small = self.run_ids("--expert-budget=1")
        self.assertEqual(small["tokens"], toks)
        self.assertGreater(small["stats"]["expert_evictions"], 0)
        # Through expertd, prefetch on and off; then the API on two workers sharing it.
        two, _ = self.plan("two.json", "--ram=4G", "--workers=2", "--expertd")
        st = Stack(BUILD, workers=2, worker_bin=os.path.join(BUILD, "services/inferd/inferd"),
                   worker_args=[f"--model={self.container}", f"--plan={two}", "--log-level=warning"],
                   gateway_args=[f"--tokenizer={self.container}"], expertd_model=self.container,
                   expertd_budget=None, expertd_args=[f"--plan={two}"], startup_timeout=90)
        try:
            for prefetch in ("--prefetch", "--no-prefetch"):
                r = moe("run", f"--model={self.container}", f"--expertd=unix:{st.expertd_sock}", prefetch,
                        f"--prompt-ids={PROMPT_IDS}", "--max-tokens=6", "--json", f"--plan={two}")
                self.assertEqual(json.loads(r.stdout)["tokens"], toks, prefetch)
            # Two workers sharing expertd, requests at once; each answer equals a lone worker's.
            bodies = [{"prompt": [int(x) for x in PROMPT_IDS.split(",")], "max_tokens": 6, "temperature": 0,
                       "logprobs": 1},
                      {"prompt": "Count: one, two, three,", "max_tokens": 5, "temperature": 0},
                      {"prompt": "Seeded", "max_tokens": 5, "temperature": 0.8, "seed": 3}]
            with concurrent.futures.ThreadPoolExecutor(max_workers=6) as ex:
                shared = [f.result() for f in [ex.submit(post, st.base_url, b) for b in bodies * 2]]
        finally:
            codes = st.stop()
        self.assertTrue(all(c == 0 for c in codes.values()), codes)
        alone = Stack(BUILD, workers=1, worker_bin=os.path.join(BUILD, "services/inferd/inferd"),
                      worker_args=[f"--model={self.container}", f"--plan={one}", "--log-level=warning"],
                      gateway_args=[f"--tokenizer={self.container}"], startup_timeout=90)
        try:
            ref_api = [post(alone.base_url, b) for b in bodies]
        finally:
            codes = alone.stop()
        self.assertTrue(all(c == 0 for c in codes.values()), codes)
        self.assertEqual(shared, ref_api * 2)
        self.assertEqual(ref_api[0][3], 6)


if __name__ == "__main__":
    unittest.main(verbosity=2)
