"""Oracle weights and checkpoints: deterministic per-tensor random weights in the checkpoint layout of
the real releases, the HF config, writing the checkpoint, loading it into HF transformers and checking
that every parameter HF holds is the tensor written. Part of tools/oracle/gen_oracle.py."""

import copy
import hashlib
import math
import os

import torch
from safetensors.torch import save_file
from transformers import DeepseekV3Config, DeepseekV3ForCausalLM, GlmMoeDsaConfig, GlmMoeDsaForCausalLM

torch.set_num_threads(1)  # deterministic reductions, and the machine is shared


# --------------------------------------------------------------------------------------------------
# Weights
# --------------------------------------------------------------------------------------------------


class Rng:
    """Deterministic per-tensor generator: each tensor's values depend only on (seed, name)."""

    def __init__(self, seed):
        self.seed = seed

    def gen(self, name):
        h = int.from_bytes(hashlib.sha256(f"{self.seed}:{name}".encode()).digest()[:8], "little")
        g = torch.Generator().manual_seed(h & ((1 << 63) - 1))
        return g

    def normal(self, name, shape, std, mean=0.0):
        return torch.randn(shape, generator=self.gen(name), dtype=torch.float32) * std + mean

    def uniform(self, name, shape, lo, hi):
        return torch.rand(shape, generator=self.gen(name), dtype=torch.float32) * (hi - lo) + lo


# Gains (std * sqrt(fan_in)) per role, tuned so that outputs are not degenerate (greedy tokens vary,
# routing spreads over experts) while HF in f32 and in BF16 still agree (see README, "robustness").
GAIN = dict(q_b=1.0, kv_a=1.0, kv_b=1.0, o=0.5, down=0.5, router=1.5, lm_head=4.0, idx_q=1.5, idx_k=1.0)


def linear(rng, name, out_f, in_f, gain=1.0):
    return rng.normal(name, (out_f, in_f), gain / math.sqrt(in_f))


def norm_w(rng, name, n):
    return rng.uniform(name, (n,), 0.8, 1.2)


def decoder_layer_weights(rng, cfg, arch, p, moe, with_indexer):
    """Weights of one decoder layer in checkpoint naming (per-expert tensors, [out, in])."""
    H = cfg["hidden_size"]
    nh = cfg["num_attention_heads"]
    dn, dr, dv = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    rq, rkv = cfg["q_lora_rank"], cfg["kv_lora_rank"]
    w = {}
    w[p + "input_layernorm.weight"] = norm_w(rng, p + "input_layernorm.weight", H)
    w[p + "post_attention_layernorm.weight"] = norm_w(rng, p + "post_attention_layernorm.weight", H)
    a = p + "self_attn."
    w[a + "q_a_proj.weight"] = linear(rng, a + "q_a_proj.weight", rq, H)
    w[a + "q_a_layernorm.weight"] = norm_w(rng, a + "q_a_layernorm.weight", rq)
    # gain 2 on q/k projections so that attention is clearly non-uniform
    w[a + "q_b_proj.weight"] = linear(rng, a + "q_b_proj.weight", nh * (dn + dr), rq, gain=GAIN["q_b"])
    w[a + "kv_a_proj_with_mqa.weight"] = linear(rng, a + "kv_a_proj_with_mqa.weight", rkv + dr, H, gain=GAIN["kv_a"])
    w[a + "kv_a_layernorm.weight"] = norm_w(rng, a + "kv_a_layernorm.weight", rkv)
    w[a + "kv_b_proj.weight"] = linear(rng, a + "kv_b_proj.weight", nh * (dn + dv), rkv, gain=GAIN["kv_b"])
    w[a + "o_proj.weight"] = linear(rng, a + "o_proj.weight", H, nh * dv, gain=GAIN["o"])
    if with_indexer:
        ih, idd = cfg["index_n_heads"], cfg["index_head_dim"]
        i = a + "indexer."
        w[i + "wq_b.weight"] = linear(rng, i + "wq_b.weight", ih * idd, rq, gain=GAIN["idx_q"])
        w[i + "wk.weight"] = linear(rng, i + "wk.weight", idd, H, gain=GAIN["idx_k"])
        w[i + "k_norm.weight"] = norm_w(rng, i + "k_norm.weight", idd)
        w[i + "k_norm.bias"] = rng.normal(i + "k_norm.bias", (idd,), 0.1)
        # positive-mean head weights: fewer exact-zero index scores, a meaningful ranking
        w[i + "weights_proj.weight"] = linear(rng, i + "weights_proj.weight", ih, H, gain=1.0)
    m = p + "mlp."
    if not moe:
        I = cfg["intermediate_size"]
        w[m + "gate_proj.weight"] = linear(rng, m + "gate_proj.weight", I, H)
        w[m + "up_proj.weight"] = linear(rng, m + "up_proj.weight", I, H)
        w[m + "down_proj.weight"] = linear(rng, m + "down_proj.weight", H, I, gain=GAIN["down"])
    else:
        E, Im = cfg["n_routed_experts"], cfg["moe_intermediate_size"]
        Is = Im * cfg["n_shared_experts"]
        w[m + "gate.weight"] = linear(rng, m + "gate.weight", E, H, gain=GAIN["router"])
        w[m + "gate.e_score_correction_bias"] = rng.normal(m + "gate.e_score_correction_bias", (E,), 0.05)
        for e in range(E):
            x = f"{m}experts.{e}."
            w[x + "gate_proj.weight"] = linear(rng, x + "gate_proj.weight", Im, H)
            w[x + "up_proj.weight"] = linear(rng, x + "up_proj.weight", Im, H)
            w[x + "down_proj.weight"] = linear(rng, x + "down_proj.weight", H, Im, gain=GAIN["down"])
        s = m + "shared_experts."
        w[s + "gate_proj.weight"] = linear(rng, s + "gate_proj.weight", Is, H)
        w[s + "up_proj.weight"] = linear(rng, s + "up_proj.weight", Is, H)
        w[s + "down_proj.weight"] = linear(rng, s + "down_proj.weight", H, Is, gain=GAIN["down"])
    return w


def build_weights(spec):
    """Checkpoint tensors (f32 master values; stored as BF16 except e_score_correction_bias)."""
    cfg, arch = spec["config"], spec["arch"]
    rng = Rng(spec["seed"])
    H, V, L = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    fk = cfg["first_k_dense_replace"]
    w = {}
    w["model.embed_tokens.weight"] = rng.normal("model.embed_tokens.weight", (V, H), 1.0)
    w["model.norm.weight"] = norm_w(rng, "model.norm.weight", H)
    w["lm_head.weight"] = linear(rng, "lm_head.weight", V, H, gain=GAIN["lm_head"])
    types = cfg.get("indexer_types") or ["full"] * L
    for l in range(L):
        w.update(decoder_layer_weights(rng, cfg, arch, f"model.layers.{l}.", moe=l >= fk,
                                       with_indexer=(arch == "glm" and types[l] == "full")))
    # MTP layer (index L): ignored by HF on load, used by our engine for drafts.
    p = f"model.layers.{L}."
    w.update(decoder_layer_weights(rng, cfg, arch, p, moe=True, with_indexer=(arch == "glm")))
    w[p + "enorm.weight"] = norm_w(rng, p + "enorm.weight", H)
    w[p + "hnorm.weight"] = norm_w(rng, p + "hnorm.weight", H)
    w[p + "eh_proj.weight"] = linear(rng, p + "eh_proj.weight", H, 2 * H)
    w[p + "shared_head.norm.weight"] = norm_w(rng, p + "shared_head.norm.weight", H)
    if arch == "dsv3":
        # DeepSeek-V3 checkpoints carry copies of the embedding and head in the MTP layer.
        w[p + "embed_tokens.weight"] = w["model.embed_tokens.weight"].clone()
        w[p + "shared_head.head.weight"] = w["lm_head.weight"].clone()
    out = {}
    for k, v in w.items():
        if k.endswith("e_score_correction_bias"):
            out[k] = v.to(torch.float32).contiguous()
        else:
            out[k] = v.to(torch.bfloat16).contiguous()
    return out


# --------------------------------------------------------------------------------------------------
# HF model helpers
# --------------------------------------------------------------------------------------------------


def make_config(spec, overrides=None):
    cfg = copy.deepcopy(spec["config"])
    if overrides:
        for k, v in overrides.items():
            cfg[k] = v
    if spec["arch"] == "glm":
        c = GlmMoeDsaConfig(**cfg)
    else:
        c = DeepseekV3Config(**cfg)
    c.eos_token_id = spec.get("eos_token_id")
    return c


def write_checkpoint(d, spec, weights):
    os.makedirs(d, exist_ok=True)
    cfg = make_config(spec)
    cfg.architectures = ["GlmMoeDsaForCausalLM" if spec["arch"] == "glm" else "DeepseekV3ForCausalLM"]
    cfg.dtype = "bfloat16"
    cfg.save_pretrained(d)
    # sort keys for a stable file; metadata like HF's
    save_file({k: weights[k] for k in sorted(weights)}, os.path.join(d, "model.safetensors"),
              metadata={"format": "pt"})


def load_model(d, spec, dtype=torch.bfloat16, overrides=None):
    cls = GlmMoeDsaForCausalLM if spec["arch"] == "glm" else DeepseekV3ForCausalLM
    if overrides:
        cfg = make_config(spec, overrides)
        cfg.dtype = "bfloat16"
        model, info = cls.from_pretrained(d, config=cfg, dtype=dtype, attn_implementation="eager",
                                          output_loading_info=True)
    else:
        model, info = cls.from_pretrained(d, dtype=dtype, attn_implementation="eager", output_loading_info=True)
    assert not info["missing_keys"], f"missing keys on load: {info['missing_keys']}"
    bad = [k for k in info["unexpected_keys"] if not k.startswith(f"model.layers.{spec['config']['num_hidden_layers']}.")]
    assert not bad, f"unexpected keys on load (not MTP): {bad}"
    assert not info.get("mismatched_keys"), info.get("mismatched_keys")
    model.eval()
    return model


def check_loaded_params(model, weights, spec):
    """Every HF parameter equals the checkpoint tensor it came from (catches silent re-init)."""
    L = spec["config"]["num_hidden_layers"]
    sd = model.state_dict()
    n = 0
    for k, v in sd.items():
        if ".mlp.experts.gate_up_proj" in k or ".mlp.experts.down_proj" in k:
            pre = k.split(".mlp.experts.")[0] + ".mlp.experts."
            E = spec["config"]["n_routed_experts"]
            if k.endswith("gate_up_proj"):
                ref = torch.stack([torch.cat([weights[f"{pre}{e}.gate_proj.weight"], weights[f"{pre}{e}.up_proj.weight"]], 0)
                                   for e in range(E)])
            else:
                ref = torch.stack([weights[f"{pre}{e}.down_proj.weight"] for e in range(E)])
        else:
            assert k in weights, f"HF parameter {k} not in checkpoint"
            ref = weights[k]
        assert torch.equal(v.float(), ref.float()), f"loaded {k} differs from checkpoint"
        n += 1
    return n
