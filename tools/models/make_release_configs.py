#!/usr/bin/env python3
"""Writes the config.json files of the real releases that `moe synth --config NAME`
builds full-size stand-ins of (models/configs/NAME.json), from MODEL_SPEC sections
2, 3 and 8 (docs/SYNTH.md). These are the *release* values, not transformers'
GlmMoeDsaConfig defaults where the two differ (rope theta 1e6 for GLM-5, 8e6 for
GLM-5.2; max_position_embeddings; head_dim as shipped, never used for shapes).

The FP8 releases' quantization_config is reproduced with its exclusion list
(modules_to_not_convert: prefixes of module paths). GLM's list names
`self_attn.indexers_proj`, which matches no tensor (the real module is
`self_attn.indexer.weights_proj`, BF16 anyway): kept as shipped.

  python3 tools/models/make_release_configs.py [--out models/configs]
"""
import argparse
import json
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def glm_common():
    return {
        "architectures": ["GlmMoeDsaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "dtype": "bfloat16",
        "eos_token_id": [154820, 154827, 154829],
        "first_k_dense_replace": 3,
        "hidden_act": "silu",
        "hidden_size": 6144,
        "index_head_dim": 128,
        "index_n_heads": 32,
        "index_topk": 2048,
        "indexer_rope_interleave": True,
        "initializer_range": 0.02,
        "intermediate_size": 12288,
        "kv_lora_rank": 512,
        "model_type": "glm_moe_dsa",
        "moe_intermediate_size": 2048,
        "moe_layer_freq": 1,
        "n_group": 1,
        "n_routed_experts": 256,
        "n_shared_experts": 1,
        "norm_topk_prob": True,
        "num_attention_heads": 64,
        "num_experts_per_tok": 8,
        "num_hidden_layers": 78,
        "num_key_value_heads": 64,
        "num_nextn_predict_layers": 1,
        "pad_token_id": 154820,
        "q_lora_rank": 2048,
        "qk_head_dim": 256,
        "qk_nope_head_dim": 192,
        "qk_rope_head_dim": 64,
        "rms_norm_eps": 1e-05,
        "rope_interleave": True,
        "routed_scaling_factor": 2.5,
        "scoring_func": "sigmoid",
        "tie_word_embeddings": False,
        "topk_group": 1,
        "topk_method": "noaux_tc",
        "use_cache": True,
        "v_head_dim": 256,
        "vocab_size": 154880,
    }


def glm_exclusions(num_layers, first_dense, indexer_layers):
    # Prefixes of module paths kept in BF16 by the FP8 release: the embedding,
    # the head, every MoE router (mlp.gate: a prefix that must not swallow
    # mlp.gate_proj) and the misnamed indexer weights_proj ("indexers_proj").
    ex = ["lm_head", "model.embed_tokens"]
    for l in range(num_layers + 1):  # + the MTP layer
        if l >= first_dense:
            ex.append(f"model.layers.{l}.mlp.gate")
        if l in indexer_layers:
            ex.append(f"model.layers.{l}.self_attn.indexers_proj")
    return ex


def fp8_quant(exclusions):
    q = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]}
    if exclusions is not None:
        q["modules_to_not_convert"] = exclusions
    return q


def glm5():
    c = glm_common()
    c.update({
        "head_dim": 64,
        "max_position_embeddings": 202752,
        "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"},
    })
    c["quantization_config"] = fp8_quant(glm_exclusions(78, 3, set(range(79))))
    return c


def glm52():
    c = glm_common()
    L = 78
    full = [max(i - 3 + 1, 0) % 4 == 0 for i in range(L)]  # index_topk_freq 4, index_skip_topk_offset 3
    c.update({
        "head_dim": 192,
        "index_share_for_mtp_iteration": True,
        "index_skip_topk_offset": 3,
        "index_topk_freq": 4,
        "indexer_types": ["full" if f else "shared" for f in full],
        "max_position_embeddings": 1048576,
        "mlp_layer_types": ["dense" if i < 3 else "sparse" for i in range(L)],
        "moe_router_dtype": "float32",
        "rope_parameters": {"rope_theta": 8000000.0, "rope_type": "default"},
    })
    indexer_layers = {i for i in range(L) if full[i]} | {L}  # the MTP layer has its own
    c["quantization_config"] = fp8_quant(glm_exclusions(L, 3, indexer_layers))
    return c


def deepseek_v3():
    return {
        "architectures": ["DeepseekV3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "first_k_dense_replace": 3,
        "hidden_act": "silu",
        "hidden_size": 7168,
        "initializer_range": 0.02,
        "intermediate_size": 18432,
        "kv_lora_rank": 512,
        "max_position_embeddings": 163840,
        "model_type": "deepseek_v3",
        "moe_intermediate_size": 2048,
        "moe_layer_freq": 1,
        "n_group": 8,
        "n_routed_experts": 256,
        "n_shared_experts": 1,
        "norm_topk_prob": True,
        "num_attention_heads": 128,
        "num_experts_per_tok": 8,
        "num_hidden_layers": 61,
        "num_key_value_heads": 128,
        "num_nextn_predict_layers": 1,
        "q_lora_rank": 1536,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "quantization_config": fp8_quant(None),
        "rms_norm_eps": 1e-06,
        "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                         "original_max_position_embeddings": 4096, "type": "yarn"},
        "rope_theta": 10000,
        "routed_scaling_factor": 2.5,
        "scoring_func": "sigmoid",
        "tie_word_embeddings": False,
        "topk_group": 4,
        "topk_method": "noaux_tc",
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "v_head_dim": 128,
        "vocab_size": 129280,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "models", "configs"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for name, cfg in (("glm-5", glm5()), ("glm-5.2", glm52()), ("deepseek-v3", deepseek_v3())):
        with open(os.path.join(a.out, name + ".json"), "w", encoding="utf-8") as f:
            json.dump(cfg, f, indent=2, sort_keys=True)
            f.write("\n")


if __name__ == "__main__":
    main()
