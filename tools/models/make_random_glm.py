#!/usr/bin/env python3
"""Writes a tiny RANDOM-weight GlmMoeDsaForCausalLM checkpoint that matches the
project tokenizer (tests/data/text/glm_tiny), so the serving stack can run end
to end before the trained model exists. Output is noise: this proves plumbing.

Shape: tests/data/oracle/glm-short/config.json (tensor names, shapes and dtypes
follow that checkpoint's model.safetensors), except vocab_size, which is the
tokenizer's vocabulary (incl. added tokens) rounded up to a multiple of 64, and
eos/pad ids, which are the tokenizer's <|endoftext|>, <|user|>, <|observation|>.
Deterministic from --seed. numpy + safetensors + ml_dtypes only.

  python3 tools/models/make_random_glm.py [--out models/tiny-glm-random] [--seed 0]
"""
import argparse
import json
import os
import shutil
import sys

import ml_dtypes
import numpy as np
from safetensors.numpy import save_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BASE_CONFIG = os.path.join(ROOT, "tests/data/oracle/glm-short/config.json")
TOKENIZER_DIR = os.path.join(ROOT, "tests/data/text/glm_tiny")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


def tokenizer_ids(path):
    tok = json.load(open(path, encoding="utf-8"))
    ids = dict(tok["model"]["vocab"])
    for a in tok.get("added_tokens", []):
        ids[a["content"]] = a["id"]
    return ids


def build_tensors(cfg, rng):
    H = cfg["hidden_size"]
    V = cfg["vocab_size"]
    nh = cfg["num_attention_heads"]
    qk = cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]
    vd = cfg["v_head_dim"]
    ql = cfg["q_lora_rank"]
    kvl = cfg["kv_lora_rank"]
    rope = cfg["qk_rope_head_dim"]
    ihd, inh = cfg["index_head_dim"], cfg["index_n_heads"]
    inter, moe = cfg["intermediate_size"], cfg["moe_intermediate_size"]
    E = cfg["n_routed_experts"]
    shared = cfg["n_shared_experts"] * moe
    std = cfg.get("initializer_range", 0.02)
    L = cfg["num_hidden_layers"]
    n_mtp = cfg.get("num_nextn_predict_layers", 0)

    t = {}

    def w(name, *shape):  # bf16 random normal
        t[name] = (rng.standard_normal(shape, dtype=np.float32) * std).astype(ml_dtypes.bfloat16)

    def ones(name, n):
        t[name] = np.ones((n,), dtype=ml_dtypes.bfloat16)

    def zeros(name, n, dtype=ml_dtypes.bfloat16):
        t[name] = np.zeros((n,), dtype=dtype)

    w("model.embed_tokens.weight", V, H)
    for i in range(L + n_mtp):
        p = f"model.layers.{i}."
        ones(p + "input_layernorm.weight", H)
        ones(p + "post_attention_layernorm.weight", H)
        a = p + "self_attn."
        w(a + "q_a_proj.weight", ql, H)
        ones(a + "q_a_layernorm.weight", ql)
        w(a + "q_b_proj.weight", nh * qk, ql)
        w(a + "kv_a_proj_with_mqa.weight", kvl + rope, H)
        ones(a + "kv_a_layernorm.weight", kvl)
        w(a + "kv_b_proj.weight", nh * (cfg["qk_nope_head_dim"] + vd), kvl)
        w(a + "o_proj.weight", H, nh * vd)
        w(a + "indexer.wq_b.weight", inh * ihd, ql)
        w(a + "indexer.wk.weight", ihd, H)
        ones(a + "indexer.k_norm.weight", ihd)
        zeros(a + "indexer.k_norm.bias", ihd)
        w(a + "indexer.weights_proj.weight", inh, H)
        m = p + "mlp."
        if i < cfg["first_k_dense_replace"]:
            w(m + "gate_proj.weight", inter, H)
            w(m + "up_proj.weight", inter, H)
            w(m + "down_proj.weight", H, inter)
        else:
            w(m + "gate.weight", E, H)
            zeros(m + "gate.e_score_correction_bias", E, np.float32)
            for e in range(E):
                x = f"{m}experts.{e}."
                w(x + "gate_proj.weight", moe, H)
                w(x + "up_proj.weight", moe, H)
                w(x + "down_proj.weight", H, moe)
            w(m + "shared_experts.gate_proj.weight", shared, H)
            w(m + "shared_experts.up_proj.weight", shared, H)
            w(m + "shared_experts.down_proj.weight", H, shared)
        if i >= L:  # MTP (next-n) layer
            w(p + "eh_proj.weight", H, 2 * H)
            ones(p + "enorm.weight", H)
            ones(p + "hnorm.weight", H)
            ones(p + "shared_head.norm.weight", H)
    ones("model.norm.weight", H)
    w("lm_head.weight", V, H)
    return t


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "models/tiny-glm-random"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hidden", type=int, default=None, help="hidden_size (default: the base config's)")
    ap.add_argument("--round-to", type=int, default=64, help="round vocab_size up to a multiple of this")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=JSON",
                    help="override a config field (e.g. --set n_routed_experts=64); repeatable. For bigger "
                         "benchmark models; the default model is made without it")
    args = ap.parse_args()

    cfg = json.load(open(BASE_CONFIG, encoding="utf-8"))
    ids = tokenizer_ids(os.path.join(TOKENIZER_DIR, "tokenizer.json"))
    n = max(ids.values()) + 1
    cfg["vocab_size"] = -(-n // args.round_to) * args.round_to
    stop = [ids[s] for s in ("<|endoftext|>", "<|user|>", "<|observation|>")]
    cfg["eos_token_id"] = stop
    cfg["pad_token_id"] = ids["<|endoftext|>"]
    if args.hidden:
        cfg["hidden_size"] = args.hidden
    for kv in args.set:
        key, sep, val = kv.partition("=")
        if not sep or key not in cfg:
            sys.exit(f"--set {kv}: expected KEY=JSON with KEY one of the config's fields")
        cfg[key] = json.loads(val)
    cfg.pop("transformers_version", None)

    rng = np.random.default_rng(args.seed)
    tensors = build_tensors(cfg, rng)
    os.makedirs(args.out, exist_ok=True)
    save_file(dict(sorted(tensors.items())), os.path.join(args.out, "model.safetensors"),
              metadata={"format": "pt"})
    with open(os.path.join(args.out, "config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    for name in TOKENIZER_FILES:
        shutil.copyfile(os.path.join(TOKENIZER_DIR, name), os.path.join(args.out, name))
    size = os.path.getsize(os.path.join(args.out, "model.safetensors"))
    print(f"wrote {args.out}: vocab {cfg['vocab_size']} (tokenizer {n}), hidden {cfg['hidden_size']}, "
          f"eos {stop}, seed {args.seed}, {len(tensors)} tensors, {size} bytes")


if __name__ == "__main__":
    sys.exit(main())
