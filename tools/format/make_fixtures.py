#!/usr/bin/env python3
"""Writes tiny Hugging Face-layout checkpoints for tests (numpy + ml_dtypes only).

  make_fixtures.py OUTDIR     (committed output: tests/data/format/fixtures/)

Four checkpoints, each a directory with config.json, model-0000K-of-0000N.safetensors,
model.safetensors.index.json and tokenizer/template side files:
  glm_bf16, glm_fp8        model_type glm_moe_dsa (indexer on every layer, MTP layer without
                           embed/head copies)
  dsv3_bf16, dsv3_fp8      model_type deepseek_v3 (no indexer; MTP layer with embed_tokens and
                           shared_head.head copies)
Real tensor names and dtypes (docs/MODEL.md section 3): FP8 variants store e4m3 weights with
float32 128x128 block `weight_scale_inv` for the same tensors as the real FP8 releases; norms,
router, embeddings, lm_head, indexer.weights_proj and the MTP eh_proj stay BF16;
e_score_correction_bias is F32. Shards are cut so that one routed expert's matrices span two
shards and one FP8 weight sits in a different shard than its scale.
Dims are tiny (hidden 64, 8 experts) but the dense MLP (192) crosses a 128-block boundary.
"""
import json
import os
import struct
import sys

import ml_dtypes
import numpy as np

BF16 = ml_dtypes.bfloat16
F8 = ml_dtypes.float8_e4m3fn
DT_NAME = {np.dtype(np.float32): "F32", np.dtype(BF16): "BF16", np.dtype(F8): "F8_E4M3"}


def config(arch):
    c = {
        "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
        "q_lora_rank": 48, "kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8,
        "v_head_dim": 16, "intermediate_size": 192, "moe_intermediate_size": 32,
        "n_shared_experts": 1, "n_routed_experts": 8, "num_experts_per_tok": 2,
        "scoring_func": "sigmoid", "topk_method": "noaux_tc", "norm_topk_prob": True,
        "routed_scaling_factor": 2.5, "first_k_dense_replace": 1, "moe_layer_freq": 1,
        "max_position_embeddings": 4096, "vocab_size": 256, "tie_word_embeddings": False,
        "num_nextn_predict_layers": 1, "torch_dtype": "bfloat16", "hidden_act": "silu",
        "attention_bias": False, "bos_token_id": 0, "eos_token_id": [1, 2], "pad_token_id": 1,
        "initializer_range": 0.02,
    }
    if arch == "glm":
        c.update({
            "architectures": ["GlmMoeDsaForCausalLM"], "model_type": "glm_moe_dsa",
            "n_group": 1, "topk_group": 1, "rms_norm_eps": 1e-5, "head_dim": 8,
            "index_n_heads": 4, "index_head_dim": 16, "index_topk": 16,
            "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"},
            "rope_interleave": True, "indexer_rope_interleave": True,
        })
    else:
        c.update({
            "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
            "n_group": 2, "topk_group": 1, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
            "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
                             "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
        })
    return c


def tensors(arch, c, rng):
    """Yields (name, float32 array, fp8_in_fp8_checkpoint) in checkpoint order."""
    H, L, nh = c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"]
    dn, dr, dv = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    rq, rkv, I, Im, E = c["q_lora_rank"], c["kv_lora_rank"], c["intermediate_size"], c["moe_intermediate_size"], c["n_routed_experts"]
    V = c["vocab_size"]

    def mat(o, i):
        return (rng.standard_normal((o, i)) * 0.05).astype(np.float32)

    def norm(n):
        return (1.0 + rng.standard_normal(n) * 0.1).astype(np.float32)

    yield "model.embed_tokens.weight", mat(V, H), False
    for l in range(L + 1):
        p = f"model.layers.{l}."
        mtp = l == L
        if mtp:
            if arch == "dsv3":
                yield p + "embed_tokens.weight", mat(V, H), False
            yield p + "enorm.weight", norm(H), False
            yield p + "hnorm.weight", norm(H), False
            yield p + "eh_proj.weight", mat(H, 2 * H), False
        yield p + "input_layernorm.weight", norm(H), False
        yield p + "post_attention_layernorm.weight", norm(H), False
        a = p + "self_attn."
        yield a + "q_a_proj.weight", mat(rq, H), True
        yield a + "q_a_layernorm.weight", norm(rq), False
        yield a + "q_b_proj.weight", mat(nh * (dn + dr), rq), True
        yield a + "kv_a_proj_with_mqa.weight", mat(rkv + dr, H), True
        yield a + "kv_a_layernorm.weight", norm(rkv), False
        yield a + "kv_b_proj.weight", mat(nh * (dn + dv), rkv), True
        yield a + "o_proj.weight", mat(H, nh * dv), True
        if arch == "glm":
            ih, idim = c["index_n_heads"], c["index_head_dim"]
            yield a + "indexer.wq_b.weight", mat(ih * idim, rq), True
            yield a + "indexer.wk.weight", mat(idim, H), True
            yield a + "indexer.k_norm.weight", norm(idim), False
            yield a + "indexer.k_norm.bias", (rng.standard_normal(idim) * 0.1).astype(np.float32), False
            yield a + "indexer.weights_proj.weight", mat(ih, H), False
        m = p + "mlp."
        if l < c["first_k_dense_replace"]:
            yield m + "gate_proj.weight", mat(I, H), True
            yield m + "up_proj.weight", mat(I, H), True
            yield m + "down_proj.weight", mat(H, I), True
        else:
            yield m + "gate.weight", mat(E, H), False
            yield m + "gate.e_score_correction_bias", (rng.standard_normal(E) * 0.01).astype(np.float32), False
            for e in range(E):
                yield m + f"experts.{e}.gate_proj.weight", mat(Im, H), True
                yield m + f"experts.{e}.up_proj.weight", mat(Im, H), True
                yield m + f"experts.{e}.down_proj.weight", mat(H, Im), True
            Is = Im * c["n_shared_experts"]
            yield m + "shared_experts.gate_proj.weight", mat(Is, H), True
            yield m + "shared_experts.up_proj.weight", mat(Is, H), True
            yield m + "shared_experts.down_proj.weight", mat(H, Is), True
        if mtp:
            yield p + "shared_head.norm.weight", norm(H), False
            if arch == "dsv3":
                yield p + "shared_head.head.weight", mat(V, H), False
    yield "model.norm.weight", norm(H), False
    yield "lm_head.weight", mat(V, H), False


def fp8_quantize(w):
    """Block 128x128 e4m3 quantization as in the FP8 releases: W ~= Wq * S[r//128, c//128]."""
    o, i = w.shape
    so, si = (o + 127) // 128, (i + 127) // 128
    s = np.zeros((so, si), np.float32)
    q = np.zeros((o, i), F8)
    for bo in range(so):
        for bi in range(si):
            blk = w[bo * 128:(bo + 1) * 128, bi * 128:(bi + 1) * 128]
            sc = np.float32(max(np.abs(blk).max() / 448.0, 1e-12))
            s[bo, bi] = sc
            q[bo * 128:(bo + 1) * 128, bi * 128:(bi + 1) * 128] = (blk / sc).astype(F8)
    return q, s


def write_safetensors(path, items):
    header, off, blobs = {}, 0, []
    for name, arr in items:
        b = np.ascontiguousarray(arr).tobytes()
        header[name] = {"dtype": DT_NAME[arr.dtype], "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((-len(h)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def make(outdir, arch, fp8, seed):
    rng = np.random.default_rng(seed)
    c = config(arch)
    if fp8:
        c["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                    "weight_block_size": [128, 128]}
    items = []
    for name, w, is_fp8 in tensors(arch, c, rng):
        if fp8 and is_fp8:
            q, s = fp8_quantize(w)
            items.append((name, q))
            items.append((name.replace(".weight", ".weight_scale_inv"), s))
        elif name.endswith("e_score_correction_bias"):
            items.append((name, w))
        else:
            items.append((name, w.astype(BF16)))
    # Cut into 4 shards by bytes; then force the cut conditions described in the docstring.
    sizes = [a.nbytes for _, a in items]
    total = sum(sizes)
    cuts, acc = [], 0
    for k, s in enumerate(sizes):
        acc += s
        if acc >= total * (len(cuts) + 1) / 4 and len(cuts) < 3:
            cuts.append(k + 1)
    names = [n for n, _ in items]
    # Cut 1: between gate_proj and up_proj of expert 5 of layer 1.
    cuts[1] = names.index("model.layers.1.mlp.experts.5.up_proj.weight")
    if fp8:  # cut 0: between q_b_proj.weight and its scale in layer 1
        cuts[0] = names.index("model.layers.1.self_attn.q_b_proj.weight_scale_inv")
    cuts = sorted(set(cuts))
    bounds = [0] + cuts + [len(items)]
    n = len(bounds) - 1
    os.makedirs(outdir, exist_ok=True)
    weight_map = {}
    for k in range(n):
        fname = f"model-{k + 1:05d}-of-{n:05d}.safetensors"
        part = items[bounds[k]:bounds[k + 1]]
        write_safetensors(os.path.join(outdir, fname), part)
        for name, _ in part:
            weight_map[name] = fname
    with open(os.path.join(outdir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    with open(os.path.join(outdir, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
    with open(os.path.join(outdir, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": c["eos_token_id"], "temperature": 1.0, "top_p": 0.95}, f, indent=2)
    with open(os.path.join(outdir, "tokenizer_config.json"), "w") as f:
        json.dump({"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"}, f, indent=2)
    with open(os.path.join(outdir, "tokenizer.json"), "w") as f:
        json.dump({"version": "1.0", "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}, f)
    with open(os.path.join(outdir, "chat_template.jinja"), "w") as f:
        f.write("[gMASK]<sop>{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}<|assistant|>\n")
    print(f"{outdir}: {n} shards, {total} bytes of tensors")


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    out = sys.argv[1]
    make(os.path.join(out, "glm_bf16"), "glm", False, 1)
    make(os.path.join(out, "glm_fp8"), "glm", True, 1)
    make(os.path.join(out, "dsv3_bf16"), "dsv3", False, 2)
    make(os.path.join(out, "dsv3_fp8"), "dsv3", True, 2)


if __name__ == "__main__":
    main()
