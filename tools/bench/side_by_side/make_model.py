#!/usr/bin/env python3
"""Writes one GLM-5-shaped model twice, with the same weights: as a moestream container (through `moe
convert`) and as a GGUF for llama.cpp (with the `gguf` package), for tools/bench/side_by_side/run.py.

Shapes: GLM-5's real layer dimensions (MODEL_SPEC.md: H 6144, 64 heads, MLA q_lora 2048 / kv_lora 512,
qk_nope 192 / qk_rope 64 / v 256, DSA indexer 32 x 128 with top-k 2048, dense MLP 12288, routed experts
2048 wide, top-8, one shared expert) with fewer layers and experts (--moe-layers, --experts) and the demo
tokenizer's 12,288-token vocabulary (tests/data/text/glm_tiny) instead of 154,880 (the embedding and head
are not what is measured). Architecture glm_moe_dsa (llama.cpp: glm-dsa), no MTP layer.

Same weights, same bytes per weight: every value lies on the grid of both formats, so neither side
rounds anything:
  routed experts  int4 k in [-7, 7] times one power-of-two scale per 64 inputs, each group holding a
                  +-7: moestream q4_g64 (scale = absmax / 7, exact) = two GGUF Q4_0 blocks of 32 with
                  d = that scale (f16, exact) and nibble k + 8; 4.5 bits per weight on both sides.
                  Stored in the HF checkpoint as FP8 e4m3 (k * 2^-e exactly) with scale_inv 2^-8.
  other matrices  int8 k in [-127, 127] times a power-of-two scale per 128 inputs (kv_b_proj: one scale,
                  since llama.cpp stores its k half transposed), each group holding a +-127: moestream
                  q8_g128 = GGUF Q8_0 with d = that scale (8.25 vs 8.5 bits per weight); embeddings and
                  lm_head one scale per row (q8_row = Q8_0). Stored as BF16 (exact).
  router, norms   f32 on both sides (BF16 / F32 in the checkpoint).

The checkpoint is written one shard at a time (a shard = one layer) and converted right away (`moe
convert --max-shards 1 --delete-source`, resumable), so the disk holds only the container, the GGUF and
one input shard: placeholder shards (valid headers over sparse data) give the converter its full plan up
front. Deterministic: every tensor comes from a generator seeded by its name.

  (pip install -r tools/bench/side_by_side/requirements.txt)
  python3 tools/bench/side_by_side/make_model.py --out DIR [--moe-layers 9] [--experts 64] [--moe build/tools/moe/moe]
      [--max-shards N] [--resume]   (a stopped run continues where its last converted shard ended)
  -> DIR/container (moestream), DIR/model.gguf (llama.cpp), DIR/config.json (the HF config)
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import zlib

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
TOKENIZER_DIR = os.path.join(ROOT, "tests/data/text/glm_tiny")

H, NH, RQ, RKV, DN, DR, DV = 6144, 64, 2048, 512, 192, 64, 256
IH, ID, ITOPK = 32, 128, 2048
I_DENSE, IM = 12288, 2048
VOCAB = 12288
TOPK = 8


def config(moe_layers, experts):
    layers = moe_layers + 1
    return {
        "architectures": ["GlmMoeDsaForCausalLM"], "model_type": "glm_moe_dsa",
        "hidden_size": H, "num_hidden_layers": layers, "num_attention_heads": NH, "num_key_value_heads": NH,
        "q_lora_rank": RQ, "kv_lora_rank": RKV, "qk_nope_head_dim": DN, "qk_rope_head_dim": DR,
        "qk_head_dim": DN + DR, "v_head_dim": DV, "head_dim": DR,
        "intermediate_size": I_DENSE, "moe_intermediate_size": IM, "n_routed_experts": experts,
        "n_shared_experts": 1, "num_experts_per_tok": TOPK, "n_group": 1, "topk_group": 1,
        "norm_topk_prob": True, "routed_scaling_factor": 2.5, "first_k_dense_replace": 1,
        "index_n_heads": IH, "index_head_dim": ID, "index_topk": ITOPK, "indexer_rope_interleave": True,
        "rope_interleave": True, "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"},
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "vocab_size": VOCAB,
        "tie_word_embeddings": False, "num_nextn_predict_layers": 0, "attention_bias": False,
        "hidden_act": "silu", "dtype": "bfloat16", "eos_token_id": [12256, 12263, 12265], "pad_token_id": 12256,
        "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                "weight_block_size": [128, 128]},
    }


def rng_for(name):
    return np.random.default_rng(zlib.crc32(name.encode()))


# ---- the grid values -------------------------------------------------------------------------------

def int4_grid(name, rows, cols):
    """k in [-7, 7] (int8) and exponent e per 64-group (scale 2^-(e+8), e in 3..5)."""
    g = rng_for(name)
    k = g.integers(-7, 8, size=(rows, cols), dtype=np.int8)
    groups = cols // 64
    e = g.integers(3, 6, size=(rows, groups), dtype=np.int8)
    pos = g.integers(0, 64, size=(rows, groups))
    sign = np.where(g.integers(0, 2, size=(rows, groups)) == 0, -7, 7).astype(np.int8)
    kk = k.reshape(rows, groups, 64)
    np.put_along_axis(kk, pos[..., None], sign[..., None], axis=2)
    return kk.reshape(rows, cols), e


E4M3 = {}  # exponent e -> byte per k + 7


def e4m3_table(e):
    """e4m3 bytes of k * 2^-e for k in [-7, 7] (all exact normals for e in 3..5)."""
    if e not in E4M3:
        t = np.zeros(15, dtype=np.uint8)
        for k in range(-7, 8):
            if k == 0:
                continue
            a = abs(k)
            p = a.bit_length() - 1
            mant = ((a << 3) >> p) - 8
            t[k + 7] = (0x80 if k < 0 else 0) | ((p - e + 7) << 3) | mant
        E4M3[e] = t
    return E4M3[e]


def int4_fp8(k, e):
    rows, cols = k.shape
    out = np.empty((rows, cols), dtype=np.uint8)
    ee = np.repeat(e, 64, axis=1)
    for ev in (3, 4, 5):
        m = ee == ev
        out[m] = e4m3_table(ev)[(k[m] + 7).astype(np.int64)]
    return out


def int4_q4_0(k, e):
    """GGUF Q4_0 blocks (f16 d, 16 bytes: element j low nibble, j + 16 high) of rows x cols."""
    rows, cols = k.shape
    nb = cols // 32
    d = np.repeat(np.ldexp(1.0, -(e.astype(np.int32) + 8)), 2, axis=1).astype(np.float16)  # [rows, nb]
    q = (k.reshape(rows, nb, 32) + 8).astype(np.uint8)
    qs = q[:, :, :16] | (q[:, :, 16:] << 4)
    blk = np.empty((rows, nb, 18), dtype=np.uint8)
    blk[:, :, :2] = d.view(np.uint8).reshape(rows, nb, 2)
    blk[:, :, 2:] = qs
    return blk.reshape(rows, nb * 18)


def int8_grid(name, rows, cols, per_row=False, one_scale=False):
    """k in [-127, 127] and a power-of-two scale per 128-group (or per row, or one)."""
    g = rng_for(name)
    k = g.integers(-127, 128, size=(rows, cols), dtype=np.int16)
    gs = cols if per_row else 128
    groups = cols // gs
    if one_scale:
        e = np.full((rows, groups), 13, dtype=np.int8)
    else:
        e = g.integers(12, 15, size=(rows, groups), dtype=np.int8)
    pos = g.integers(0, gs, size=(rows, groups))
    sign = np.where(g.integers(0, 2, size=(rows, groups)) == 0, -127, 127).astype(np.int16)
    kk = k.reshape(rows, groups, gs)
    np.put_along_axis(kk, pos[..., None], sign[..., None], axis=2)
    return kk.reshape(rows, cols).astype(np.int8), e, gs


def int8_values(k, e, gs):
    rows, cols = k.shape
    s = np.repeat(np.ldexp(1.0, -e.astype(np.int32)), gs, axis=1).astype(np.float32)
    return k.astype(np.float32) * s


def bf16(x):
    return (np.ascontiguousarray(x, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)


def int8_q8_0(k, e, gs):
    rows, cols = k.shape
    nb = cols // 32
    d = np.repeat(np.ldexp(1.0, -e.astype(np.int32)), gs // 32, axis=1).astype(np.float16)
    blk = np.empty((rows, nb, 34), dtype=np.uint8)
    blk[:, :, :2] = d.view(np.uint8).reshape(rows, nb, 2)
    blk[:, :, 2:] = k.reshape(rows, nb, 32).view(np.uint8)
    return blk.reshape(rows, nb * 34)


def norm_values(name, n):
    g = rng_for(name)
    return (1.0 + g.integers(-16, 17, size=n) / 64.0).astype(np.float32)  # exact in bf16


def f32_values(name, shape, scale):
    g = rng_for(name)
    return (g.integers(-64, 65, size=shape) * scale).astype(np.float32)  # k * 2^-m: exact in bf16


# ---- the model's tensors, in file order ------------------------------------------------------------

class Tensor:
    """One HF tensor: kind int4 / int8 / int8row / int8one / norm / f32 / bias."""

    def __init__(self, name, shape, kind, gguf=None):
        self.name, self.shape, self.kind, self.gguf = name, shape, kind, gguf

    def hf_parts(self):
        """[(name, dtype, shape)] as stored in the checkpoint."""
        if self.kind == "int4":
            r, c = self.shape
            return [(self.name, "F8_E4M3", [r, c]), (self.name + "_scale_inv", "F32", [-(-r // 128), -(-c // 128)])]
        if self.kind == "bias":
            return [(self.name, "F32", self.shape)]
        return [(self.name, "BF16", self.shape)]


def layer_tensors(layer, experts):
    p = f"model.layers.{layer}."
    a = p + "self_attn."
    ts = [
        Tensor(p + "input_layernorm.weight", [H], "norm", f"blk.{layer}.attn_norm.weight"),
        Tensor(a + "q_a_proj.weight", [RQ, H], "int8", f"blk.{layer}.attn_q_a.weight"),
        Tensor(a + "q_a_layernorm.weight", [RQ], "norm", f"blk.{layer}.attn_q_a_norm.weight"),
        Tensor(a + "q_b_proj.weight", [NH * (DN + DR), RQ], "int8", f"blk.{layer}.attn_q_b.weight"),
        Tensor(a + "kv_a_proj_with_mqa.weight", [RKV + DR, H], "int8", f"blk.{layer}.attn_kv_a_mqa.weight"),
        Tensor(a + "kv_a_layernorm.weight", [RKV], "norm", f"blk.{layer}.attn_kv_a_norm.weight"),
        Tensor(a + "kv_b_proj.weight", [NH * (DN + DV), RKV], "int8one", "kv_b"),
        Tensor(a + "o_proj.weight", [H, NH * DV], "int8", f"blk.{layer}.attn_output.weight"),
        Tensor(a + "indexer.wq_b.weight", [IH * ID, RQ], "int8", f"blk.{layer}.indexer.attn_q_b.weight"),
        Tensor(a + "indexer.wk.weight", [ID, H], "int8", f"blk.{layer}.indexer.attn_k.weight"),
        Tensor(a + "indexer.k_norm.weight", [ID], "norm", f"blk.{layer}.indexer.k_norm.weight"),
        Tensor(a + "indexer.k_norm.bias", [ID], "bias", f"blk.{layer}.indexer.k_norm.bias"),
        Tensor(a + "indexer.weights_proj.weight", [IH, H], "int8", f"blk.{layer}.indexer.proj.weight"),
        Tensor(p + "post_attention_layernorm.weight", [H], "norm", f"blk.{layer}.ffn_norm.weight"),
    ]
    m = p + "mlp."
    if layer == 0:
        ts += [Tensor(m + "gate_proj.weight", [I_DENSE, H], "int8", "blk.0.ffn_gate.weight"),
               Tensor(m + "up_proj.weight", [I_DENSE, H], "int8", "blk.0.ffn_up.weight"),
               Tensor(m + "down_proj.weight", [H, I_DENSE], "int8", "blk.0.ffn_down.weight")]
        return ts
    ts += [Tensor(m + "gate.weight", [experts, H], "f32", f"blk.{layer}.ffn_gate_inp.weight"),
           Tensor(m + "gate.e_score_correction_bias", [experts], "bias", f"blk.{layer}.exp_probs_b.bias"),
           Tensor(m + "shared_experts.gate_proj.weight", [IM, H], "int8", f"blk.{layer}.ffn_gate_shexp.weight"),
           Tensor(m + "shared_experts.up_proj.weight", [IM, H], "int8", f"blk.{layer}.ffn_up_shexp.weight"),
           Tensor(m + "shared_experts.down_proj.weight", [H, IM], "int8", f"blk.{layer}.ffn_down_shexp.weight")]
    for w, shape in (("gate_proj", [IM, H]), ("up_proj", [IM, H]), ("down_proj", [H, IM])):
        for e in range(experts):
            ts.append(Tensor(m + f"experts.{e}.{w}.weight", shape, "int4", f"exps:{w}"))
    return ts


def global_tensors():
    return [Tensor("model.embed_tokens.weight", [VOCAB, H], "int8row", "token_embd.weight"),
            Tensor("model.norm.weight", [H], "norm", "output_norm.weight"),
            Tensor("lm_head.weight", [VOCAB, H], "int8row", "output.weight")]


# ---- the HF checkpoint (placeholders, then one shard at a time) ------------------------------------

def shard_layout(tensors):
    header, off = {}, 0
    dsize = {"F8_E4M3": 1, "BF16": 2, "F32": 4}
    for t in tensors:
        for name, dt, shape in t.hf_parts():
            n = int(np.prod(shape)) * dsize[dt]
            header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + n]}
            off += n
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-(8 + len(blob)) % 8)
    return header, blob, 8 + len(blob), off


def write_placeholder(path, tensors):
    _, blob, start, size = shard_layout(tensors)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)) + blob)
        f.truncate(start + size)  # sparse: no disk until filled


class ShardFiller:
    def __init__(self, path, tensors):
        self.header, _, self.start, _ = shard_layout(tensors)
        self.f = open(path, "r+b")

    def put(self, name, arr):
        lo, hi = self.header[name]["data_offsets"]
        b = np.ascontiguousarray(arr).tobytes()
        assert len(b) == hi - lo, (name, len(b), hi - lo)
        self.f.seek(self.start + lo)
        self.f.write(b)

    def close(self):
        self.f.flush()
        os.fsync(self.f.fileno())
        self.f.close()


# ---- the GGUF ----------------------------------------------------------------------------------------

def gguf_plan(cfg):
    """[(gguf name, numpy byte shape, ggml type)] in file order, mirroring the HF layer order."""
    import gguf
    Q = gguf.GGMLQuantizationType
    E, L = cfg["n_routed_experts"], cfg["num_hidden_layers"]
    plan = []

    def q8(rows, cols):
        return [rows, cols // 32 * 34], Q.Q8_0

    def add(t):
        if t.gguf == "kv_b":
            layer = t.name.split(".")[2]
            plan.append((f"blk.{layer}.attn_k_b.weight", [NH, RKV, DN // 32 * 34], Q.Q8_0))
            plan.append((f"blk.{layer}.attn_v_b.weight", [NH, DV, RKV // 32 * 34], Q.Q8_0))
        elif t.kind in ("int8", "int8row"):
            shape, ty = q8(*t.shape)
            plan.append((t.gguf, shape, ty))
        elif t.kind in ("norm", "bias", "f32"):
            plan.append((t.gguf, list(t.shape), Q.F32))
    for t in global_tensors():
        add(t)
    for layer in range(L):
        for t in layer_tensors(layer, E):
            if t.kind != "int4":
                add(t)
        if layer > 0:
            for w, (r, c) in (("gate_proj", (IM, H)), ("up_proj", (IM, H)), ("down_proj", (H, IM))):
                gname = {"gate_proj": "ffn_gate_exps", "up_proj": "ffn_up_exps", "down_proj": "ffn_down_exps"}[w]
                plan.append((f"blk.{layer}.{gname}.weight", [E, r, c // 32 * 18], Q.Q4_0))
    return plan


def gguf_open(path, cfg):
    import gguf
    arch = "glm-dsa"
    w = gguf.GGUFWriter(path, arch)
    L, E = cfg["num_hidden_layers"], cfg["n_routed_experts"]
    w.add_name("moestream side-by-side GLM-5 slice")
    w.add_block_count(L)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(H)
    w.add_feed_forward_length(I_DENSE)
    w.add_head_count(NH)
    w.add_head_count_kv(1)  # MLA as MQA (llama.cpp's convention for deepseek2 / glm-dsa)
    w.add_rope_freq_base(cfg["rope_parameters"]["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_expert_count(E)
    w.add_expert_used_count(TOPK)
    w.add_leading_dense_block_count(cfg["first_k_dense_replace"])
    w.add_vocab_size(VOCAB)
    w.add_q_lora_rank(RQ)
    w.add_kv_lora_rank(RKV)
    w.add_key_length(RKV + DR)
    w.add_value_length(RKV)
    w.add_key_length_mla(DN + DR)
    w.add_value_length_mla(DV)
    w.add_expert_feed_forward_length(IM)
    w.add_expert_shared_count(1)
    w.add_expert_weights_scale(cfg["routed_scaling_factor"])
    w.add_expert_weights_norm(True)
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    w.add_rope_dimension_count(DR)
    w.add_uint32(f"{arch}.attention.indexer.head_count", IH)
    w.add_uint32(f"{arch}.attention.indexer.key_length", ID)
    w.add_uint32(f"{arch}.attention.indexer.top_k", ITOPK)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_0)
    # Vocabulary: the demo tokenizer (the bench feeds token ids; this only has to load).
    tok = json.load(open(os.path.join(TOKENIZER_DIR, "tokenizer.json")))
    vocab = tok["model"]["vocab"]
    tokens = [""] * VOCAB
    types = [gguf.TokenType.UNUSED] * VOCAB
    for s, i in vocab.items():
        if i < VOCAB:
            tokens[i], types[i] = s, gguf.TokenType.NORMAL
    for a in tok.get("added_tokens", []):
        if a["id"] < VOCAB:
            tokens[a["id"]], types[a["id"]] = a["content"], gguf.TokenType.CONTROL
    for i in range(VOCAB):
        if not tokens[i]:
            tokens[i] = f"[PAD{i}]"
    merges = tok["model"].get("merges", [])
    merges = [m if isinstance(m, str) else " ".join(m) for m in merges]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_eos_token_id(12256)
    w.add_bos_token_id(12256)
    for name, shape, ty in gguf_plan(cfg):
        nbytes = int(np.prod(shape))
        w.add_tensor_info(name, shape, np.dtype(np.uint8) if ty not in (gguf.GGMLQuantizationType.F32,) else np.float32,
                          nbytes * (1 if ty != gguf.GGMLQuantizationType.F32 else 4),
                          raw_dtype=ty if ty != gguf.GGMLQuantizationType.F32 else None)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    return w


def gguf_tensor_count(ts, experts):
    """How many GGUF tensors the HF tensors ts become (kv_b: two; each projection's experts: one merged)."""
    n = sum(2 if t.gguf == "kv_b" else 1 for t in ts if t.kind != "int4")
    return n + sum(t.kind == "int4" for t in ts) // experts


def resume_point(out, cfg, names):
    """Shards already converted: those whose HF input the converter has deleted (it deletes a shard only once
    its records are in the container), which must be a prefix."""
    hf = os.path.join(out, "hf")
    for f in ("model.safetensors.index.json", "config.json"):
        if not os.path.exists(os.path.join(hf, f)):
            sys.exit(f"--resume: {os.path.join(hf, f)} is missing (not an interrupted make_model.py run)")
    if json.load(open(os.path.join(hf, "config.json"))) != cfg:
        sys.exit("--resume: --moe-layers / --experts differ from the interrupted run's config.json")
    present = [os.path.exists(os.path.join(hf, n)) for n in names]
    done = present.index(True) if True in present else len(names)
    if not all(present[done:]):
        sys.exit(f"--resume: HF shards {names[done:]} are not all present (the converted ones must be a prefix)")
    if not os.path.exists(os.path.join(out, "model.gguf")):
        sys.exit("--resume: model.gguf is missing")
    return done


def gguf_reopen(path, cfg, done_shards):
    """A writer positioned after done_shards' tensors in the existing GGUF at path. The header is rebuilt into
    a side file (deterministic: the same bytes) and compared; the data of the shards not yet done is cut off."""
    tmp = path + ".header"
    w = gguf_open(tmp, cfg)
    w.fout[0].close()
    header = open(tmp, "rb").read()
    os.remove(tmp)
    with open(path, "rb") as f:
        if f.read(len(header)) != header:
            sys.exit(f"--resume: {path}'s header differs from this configuration's")
    off = len(header)
    n = sum(gguf_tensor_count(ts, cfg["n_routed_experts"]) for ts in done_shards)
    for _ in range(n):
        ti = w.tensors[0].pop(next(iter(w.tensors[0])))
        off = w.ggml_pad(off, w.data_alignment) + w.ggml_pad(ti.nbytes, w.data_alignment)
    if os.path.getsize(path) < off:
        sys.exit(f"--resume: {path} holds {os.path.getsize(path)} bytes, fewer than the {off} of the shards done")
    f = open(path, "r+b")
    f.truncate(off)
    f.seek(off)
    w.fout[0] = f
    w.state = type(w.state).WEIGHTS if n else w.state
    return w


# ---- one pass: values -> HF shard + GGUF tensors ---------------------------------------------------

def emit(t, fill, gw, pending):
    """Writes tensor t to the HF shard (fill) and, unless it is part of a merged GGUF tensor, to the GGUF."""
    if t.kind == "int4":
        k, e = int4_grid(t.name, *t.shape)
        fill.put(t.name, int4_fp8(k, e))
        fill.put(t.name + "_scale_inv", np.full([-(-t.shape[0] // 128), -(-t.shape[1] // 128)], 2.0 ** -8,
                                                dtype=np.float32))
        pending.append(int4_q4_0(k, e))
        return
    if t.kind in ("int8", "int8row", "int8one"):
        k, e, gs = int8_grid(t.name, *t.shape, per_row=t.kind == "int8row", one_scale=t.kind == "int8one")
        fill.put(t.name, bf16(int8_values(k, e, gs)))
        if t.gguf == "kv_b":
            kv = k.reshape(NH, DN + DV, RKV)
            kb = np.ascontiguousarray(kv[:, :DN, :].transpose(0, 2, 1)).reshape(NH * RKV, DN)
            vb = np.ascontiguousarray(kv[:, DN:, :]).reshape(NH * DV, RKV)
            one = lambda n, c: np.full((n, c // 32), 13, dtype=np.int8)  # noqa: E731
            gw.write_tensor_data(int8_q8_0(kb, one(NH * RKV, DN), 32).reshape(NH, RKV, DN // 32 * 34))
            gw.write_tensor_data(int8_q8_0(vb, one(NH * DV, RKV), 32).reshape(NH, DV, RKV // 32 * 34))
        else:
            gw.write_tensor_data(int8_q8_0(k, e, gs))
        return
    if t.kind == "norm":
        v = norm_values(t.name, t.shape[0])
        fill.put(t.name, bf16(v))
    elif t.kind == "f32":
        v = f32_values(t.name, t.shape, 2.0 ** -12)
        fill.put(t.name, bf16(v))
    else:  # bias (F32 in the checkpoint)
        v = f32_values(t.name, t.shape, 2.0 ** -10)
        fill.put(t.name, v)
    gw.write_tensor_data(v.astype(np.float32))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--moe-layers", type=int, default=9)
    ap.add_argument("--experts", type=int, default=64)
    ap.add_argument("--moe", default=os.path.join(ROOT, "build/tools/moe/moe"))
    ap.add_argument("--resume", action="store_true",
                    help="continue an interrupted run in --out (same --moe-layers / --experts)")
    ap.add_argument("--max-shards", type=int, default=0, help="stop after this many shards (0: all; --resume goes on)")
    a = ap.parse_args()
    cfg = config(a.moe_layers, a.experts)
    L, E = cfg["num_hidden_layers"], cfg["n_routed_experts"]
    hf = os.path.join(a.out, "hf")
    # Shard k = layer k - 1 (shard 1 also holds the embeddings, final norm and head).
    shards = [global_tensors() + layer_tensors(0, E)] + [layer_tensors(l, E) for l in range(1, L)]
    names = [f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors" for k in range(len(shards))]
    gguf_path = os.path.join(a.out, "model.gguf")
    if a.resume:
        done = resume_point(a.out, cfg, names)
        gw = gguf_reopen(gguf_path, cfg, shards[:done])
    else:
        if os.path.exists(a.out) and os.listdir(a.out):
            sys.exit(f"--out {a.out} is not empty (continue an interrupted run with --resume, or start from an "
                     "empty directory)")
        done = 0
        os.makedirs(hf, exist_ok=True)
        with open(os.path.join(hf, "config.json"), "w") as f:
            json.dump(cfg, f, indent=1)
        shutil.copy(os.path.join(hf, "config.json"), os.path.join(a.out, "config.json"))
        for fn in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
            if os.path.exists(os.path.join(TOKENIZER_DIR, fn)):
                shutil.copy(os.path.join(TOKENIZER_DIR, fn), os.path.join(hf, fn))
        weight_map = {}
        for name, ts in zip(names, shards):
            write_placeholder(os.path.join(hf, name), ts)
            for t in ts:
                for n, _, _ in t.hf_parts():
                    weight_map[n] = name
        with open(os.path.join(hf, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {}, "weight_map": weight_map}, f)
        gw = gguf_open(gguf_path, cfg)
    written = 0
    for k, (name, ts) in enumerate(zip(names, shards)):
        if k < done:
            continue
        if a.max_shards and written == a.max_shards:
            gw.fout[0].close()
            print(f"stopped after {written} shard(s): {k}/{len(shards)} done (run again with --resume)")
            return
        written += 1
        fill = ShardFiller(os.path.join(hf, name), ts)
        pending = []
        for t in ts:
            emit(t, fill, gw, pending)
            if len(pending) == E:  # one of the layer's merged GGUF tensors (gate, up, down: E experts each)
                gw.write_tensor_data(np.stack(pending))
                pending.clear()
        fill.close()
        r = subprocess.run([a.moe, "convert", "--in", hf, "--out", os.path.join(a.out, "container"),
                            "--delete-source", "--max-shards", "1", "--verify", "quick"])
        if r.returncode != 0:
            sys.exit(f"moe convert failed on shard {k + 1}")
        gw.fout[0].flush()
        os.fsync(gw.fout[0].fileno())
        print(f"shard {k + 1}/{len(shards)} written and converted", flush=True)
    gw.close()
    print(f"container: {os.path.join(a.out, 'container')}, gguf: {os.path.join(a.out, 'model.gguf')}")


if __name__ == "__main__":
    main()
