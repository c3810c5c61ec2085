"""The oracle's models and constants: the three tiny configurations (glm-short, glm-dsa, deepseek-v3),
their seeds and prompt lengths, and the numbers the goldens are recorded and checked with. Plain data,
no torch (tools/train imports GLM_ARCH from here). Part of tools/oracle/gen_oracle.py."""

SCHEMA = "moestream-oracle-v1"
N_GREEDY = 32
N_TF_EXTRA = 32  # teacher-forced sequence = prompt + 32 random ids
TOPK = 5
# Teacher-forced positions whose top1-top2 BF16 logit margin is below this are near-ties: an engine
# may legitimately disagree with HF there (about 2x the largest f32-vs-BF16 margin change seen).
NEAR_TIE = 0.25

# Discrete choices must not hinge on float32 rounding: smallest allowed gap between the K-th and
# (K+1)-th router selection score (absolute, scores are in (0, 1) plus bias) and between the k-th and
# (k+1)-th DSA index score (relative to the k-th; 5e-4 is 1/8 of a BF16 ulp).
MIN_ROUTER_GAP = 1e-5
MIN_INDEX_REL_GAP = 5e-4

# --------------------------------------------------------------------------------------------------
# Model definitions. All dims deliberately distinct (dn != dv != dr, rq != rkv, id != dq) so that a
# swapped split or a wrong stride shows up as a shape error or a wrong answer, not a silent match.
# --------------------------------------------------------------------------------------------------

# What GLM-5's config.json sets besides sizes, the same in every tiny GLM model (the oracle's and the
# trained demo model's, tools/train/train.py): one shared expert, no expert groups, routed scaling
# 2.5 with normalized top-k weights, SiLU, untied head, no attention bias, interleaved RoPE in MLA
# and in the indexer, one MTP layer.
GLM_ARCH = dict(
    n_shared_experts=1, n_group=1, topk_group=1, routed_scaling_factor=2.5, norm_topk_prob=True,
    hidden_act="silu", tie_word_embeddings=False, attention_bias=False, bos_token_id=None, pad_token_id=None,
    # not read by HF 5.24 (it hard-codes interleaved RoPE for GLM) but present in real GLM-5 configs
    rope_interleave=True, indexer_rope_interleave=True,
    num_nextn_predict_layers=1,
)

GLM_COMMON = dict(
    GLM_ARCH,
    # sizes: V, H, I (dense MLP), Im (routed expert)
    vocab_size=384, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
    # MLA: nh heads (nh KV heads), rq, rkv, dn, dr, dv
    num_attention_heads=4, num_key_value_heads=4, q_lora_rank=48, kv_lora_rank=40,
    qk_nope_head_dim=24, qk_rope_head_dim=16, v_head_dim=32,
    # MoE: E routed experts, K per token
    n_routed_experts=16, num_experts_per_tok=4,
    # DSA indexer: ih heads of id
    index_n_heads=6, index_head_dim=40,
    max_position_embeddings=512, rms_norm_eps=1e-5,
)

MODELS = {
    "glm-short": dict(
        arch="glm",
        seed=1001,
        config=dict(GLM_COMMON, num_hidden_layers=3, first_k_dense_replace=1, index_topk=128,
                    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
        prompt_lens=[1, 7, 16, 29],
        debug_prompt_len=12,
        robust_mode="decisions",
    ),
    "glm-dsa": dict(
        arch="glm",
        seed=2002,
        config=dict(GLM_COMMON, num_hidden_layers=4, first_k_dense_replace=1, index_topk=8,
                    indexer_types=["full", "shared", "shared", "shared"],
                    rope_parameters={"rope_type": "default", "rope_theta": 8000000.0}),
        prompt_lens=[48, 50, 52],
        debug_prompt_len=20,
        robust_mode="tokens",  # top-8 of ~80 keys flips under f32-vs-BF16 noise; see README
    ),
    "deepseek-v3": dict(
        arch="dsv3",
        seed=3003,
        config=dict(
            # sizes: V, H, I, Im; layers (the first dense)
            vocab_size=320, hidden_size=80, intermediate_size=112, moe_intermediate_size=24,
            num_hidden_layers=3, first_k_dense_replace=1,
            # MLA: nh, rq, rkv, dn, dr, dv
            num_attention_heads=4, num_key_value_heads=4, q_lora_rank=56, kv_lora_rank=48,
            qk_nope_head_dim=24, qk_rope_head_dim=32, v_head_dim=20,
            # MoE: one shared + 16 routed, top-4 within the top-2 of 4 groups (DeepSeek-V3's group limit)
            n_shared_experts=1, n_routed_experts=16, num_experts_per_tok=4, n_group=4, topk_group=2,
            routed_scaling_factor=2.5, norm_topk_prob=True,
            hidden_act="silu", max_position_embeddings=163840, rms_norm_eps=1e-6,
            rope_parameters={
                "rope_type": "yarn",
                "rope_theta": 10000.0,
                "factor": 40.0,
                "original_max_position_embeddings": 4096,
                "beta_fast": 32.0,
                "beta_slow": 1.0,
                "mscale": 1.0,
                "mscale_all_dim": 1.0,
            },
            rope_interleave=True, tie_word_embeddings=False, attention_bias=False, num_mtp_layers=1,
            bos_token_id=None, pad_token_id=None,
        ),
        prompt_lens=[3, 17, 40],
        debug_prompt_len=12,
        robust_mode="decisions",
    ),
}
