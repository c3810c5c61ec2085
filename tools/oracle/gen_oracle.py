#!/usr/bin/env python3
"""Reference oracle: tiny random-weight GLM-5.x / DeepSeek-V3 models and their HF behaviour.

Problem: the C++ engine must be token-exact against Hugging Face transformers on GlmMoeDsaForCausalLM
and DeepseekV3ForCausalLM, but real checkpoints are 700+ GB. This script builds three tiny models
(~0.5-1 MB each) from fixed seeds, writes them as HF checkpoints (BF16, per-expert tensor names as in
the real releases, plus randomly generated MTP-layer weights), runs HF transformers on them (eager
attention, BF16) and records greedy tokens, teacher-forced argmax/top-k log-probabilities, per-layer
debug tensors and sanity checks into tests/data/oracle/<name>/. See tools/oracle/README.md.

Contract: deterministic. Running it twice produces byte-identical safetensors and identical goldens
(it checks this for the outputs it computes). Needs torch + transformers as pinned in
requirements-oracle.txt; the outputs are consumed without torch.

Files: oracle_specs.py (the models and constants), oracle_weights.py (weights, checkpoints, HF
loading), oracle_runs.py (what HF does: greedy, teacher forcing, debug tensors, MTP, statistics),
oracle_checks.py (prompt robustness and the checks on the goldens); this file records one model's
goldens (run_model) and is the command line.

Usage: python3 tools/oracle/gen_oracle.py [--out tests/data/oracle] [--only glm-short,...]
"""

import argparse
import hashlib
import json
import os
import platform
import sys

import numpy as np
import torch
import transformers
from safetensors.numpy import save_file as np_save_file
from safetensors.torch import load_file
from transformers.models.deepseek_v3 import modeling_deepseek_v3 as mdsv3
from transformers.models.glm_moe_dsa import modeling_glm_moe_dsa as mglm

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_ref  # noqa: E402  (NumPy-only second implementation, used as a robustness yardstick)
from oracle_checks import check_goldens, count_diff, make_prompts  # noqa: E402
from oracle_runs import (AttnF32, ExactAccum, NoCtx, debug_dump, decisions, forward_logits, greedy,  # noqa: E402
                         greedy_recompute, half_split_rope, indexer_stats, mtp_teacher_forced, routing_stats,
                         tf_record)
from oracle_specs import (MIN_INDEX_REL_GAP, MIN_ROUTER_GAP, MODELS, N_GREEDY, NEAR_TIE, SCHEMA,  # noqa: E402
                          TOPK)
from oracle_weights import build_weights, check_loaded_params, load_model, write_checkpoint  # noqa: E402


# --------------------------------------------------------------------------------------------------
# Main per-model driver
# --------------------------------------------------------------------------------------------------


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def run_model(name, spec, outdir):
    d = os.path.join(outdir, name)
    weights = build_weights(spec)
    weights2 = build_weights(spec)
    assert all(torch.equal(weights[k], weights2[k]) for k in weights), "weight generation not deterministic"
    spec = dict(spec)
    V = spec["config"]["vocab_size"]
    # EOS: the last vocabulary id; asserted below never to be produced, so an engine that stops at EOS
    # still emits all 32 greedy tokens.
    spec["eos_token_id"] = [V - 1]
    write_checkpoint(d, spec, weights)
    # Round-trip: what is on disk is what we generated.
    disk = load_file(os.path.join(d, "model.safetensors"))
    assert set(disk) == set(weights) and all(torch.equal(disk[k], weights[k]) for k in weights)

    model = load_model(d, spec)
    n_checked = check_loaded_params(model, weights, spec)
    model32 = load_model(d, spec, dtype=torch.float32)

    alt = (model32, NoCtx) if spec["robust_mode"] == "decisions" else (model, AttnF32)
    spec["numpy_models"] = [numpy_ref.Model(d, "bf16", absorbed=True), numpy_ref.Model(d, "bf16")]
    if spec["robust_mode"] == "decisions":
        spec["numpy_models"].append(numpy_ref.Model(d, "f32", absorbed=True))
    prompts, dbg_ids, tried = make_prompts(spec, model, alt)
    recs = []
    sanity = {"loaded_params_checked": n_checked, "prompt_candidates_tried": tried,
              "numpy_ref_yardsticks": ["bf16_absorbed", "bf16"] + (["f32_absorbed"] if spec["robust_mode"] == "decisions" else []),
              "min_router_gap": MIN_ROUTER_GAP, "min_index_rel_gap": MIN_INDEX_REL_GAP,
              "prompt_acceptance": ("f32_" if spec["robust_mode"] == "decisions" else "attn_f32_") + spec["robust_mode"], "near_tie_margin": NEAR_TIE}
    all_tf_seqs = []
    f32_greedy_agree, f32_tf_agree, f32_tf_total, max_logit_diff = [], 0, 0, 0.0
    recompute_agree = []
    max_margin_delta = 0.0
    exact_identical = []
    attn32_greedy_agree = []
    for i, (p, tail, toks, margins) in enumerate(prompts):
        toks_b, _ = greedy(model, p)
        assert toks == toks_b, f"{name}: greedy not repeatable"
        rc = greedy_recompute(model, p)
        recompute_agree.append(32 - count_diff(toks, rc))
        tf_ids = p + tail
        all_tf_seqs.append(tf_ids)
        lg = forward_logits(model, tf_ids)
        lg2 = forward_logits(model, tf_ids)
        assert torch.equal(lg, lg2), f"{name}: forward not repeatable"
        rec_tf = tf_record(lg, tf_ids)
        with ExactAccum():
            exact_identical.append(bool(torch.equal(forward_logits(model, tf_ids), lg)))
        # f32 robustness check: same weights, f32 activations
        toks32, _ = greedy(model32, p)
        f32_greedy_agree.append(32 - count_diff(toks, toks32))
        with AttnF32():
            attn32_greedy_agree.append(32 - count_diff(toks, greedy(model, p)[0]))
        lg32 = forward_logits(model32, tf_ids)
        a32 = [int(x) for x in torch.argmax(lg32, -1)]
        for pos, (a, b) in enumerate(torch.topk(lg, 2, -1).indices.tolist()):
            md = abs(float(lg[pos, a] - lg[pos, b]) - float(lg32[pos, a] - lg32[pos, b]))
            max_margin_delta = max(max_margin_delta, md)
        f32_tf_agree += len(a32) - count_diff(a32, rec_tf["argmax"])
        f32_tf_total += len(a32)
        max_logit_diff = max(max_logit_diff, float((lg32 - lg).abs().max()))
        assert V - 1 not in toks, f"{name}: greedy produced the EOS id"
        mtp = mtp_teacher_forced(spec, weights, model, p + toks)
        recs.append({
            "name": f"p{i}",
            "ids": p,
            "greedy": {"tokens": toks, "margin": [round(m, 6) for m in margins]},
            "teacher_forced": dict(ids=tf_ids, **rec_tf),
            "mtp_teacher_forced": dict(ids=p + toks, **mtp),
        })
    sanity["greedy_cache_vs_recompute_agree"] = recompute_agree
    sanity["f32_greedy_agree"] = f32_greedy_agree
    sanity["attn_f32_greedy_agree"] = attn32_greedy_agree
    sanity["f32_teacher_forced_argmax_agree"] = [f32_tf_agree, f32_tf_total]
    sanity["f32_vs_bf16_max_abs_logit_diff"] = round(max_logit_diff, 6)
    sanity["f32_vs_bf16_max_margin_delta"] = round(max_margin_delta, 6)
    sanity["bf16_exact_accumulation_logits_identical"] = exact_identical
    sanity["decision_flips_f32_vs_bf16"] = {}
    for r in recs:
        for seq_name in ("teacher_forced",):
            seq = r[seq_name]["ids"]
            a, b = decisions(model, seq), decisions(model32, seq)
            for k in a:
                key = f"{k[0]}.{k[1]}"
                sanity["decision_flips_f32_vs_bf16"].setdefault(key, [0, 0])
                sanity["decision_flips_f32_vs_bf16"][key][0] += sum(x != y for x, y in zip(a[k], b[k]))
                sanity["decision_flips_f32_vs_bf16"][key][1] += len(a[k])
    sanity["greedy_distinct_tokens"] = [len(set(r["greedy"]["tokens"])) for r in recs]
    sanity["greedy_min_margin"] = round(min(min(r["greedy"]["margin"]) for r in recs), 6)
    sanity["routing"] = routing_stats(model, spec, all_tf_seqs)

    # Variants that must change the output (the goldens discriminate the feature).
    def variant(overrides=None, patch=None):
        mod = mglm if spec["arch"] == "glm" else mdsv3
        saved = None
        if patch is not None:
            saved = mod.apply_rotary_pos_emb_interleave
            mod.apply_rotary_pos_emb_interleave = patch
        try:
            m = load_model(d, spec, overrides=overrides) if overrides else model
            g_diff = sum(count_diff(r["greedy"]["tokens"], greedy(m, r["ids"])[0]) for r in recs)
            t_diff = sum(count_diff(r["teacher_forced"]["argmax"],
                                    [int(x) for x in torch.argmax(forward_logits(m, r["teacher_forced"]["ids"]), -1)])
                         for r in recs)
        finally:
            if saved is not None:
                mod.apply_rotary_pos_emb_interleave = saved
        return {"greedy_tokens_changed": g_diff, "teacher_forced_argmax_changed": t_diff,
                "teacher_forced_positions": sum(len(r["teacher_forced"]["ids"]) for r in recs)}

    variants = {}
    variants["half_split_rope_everywhere"] = variant(patch=half_split_rope)
    if spec["arch"] == "glm":
        def indexer_only(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
            f = half_split_rope if unsqueeze_dim == 2 else VARIANT_ORIG_GLM
            return f(q, k, cos, sin, position_ids, unsqueeze_dim)
        if spec["config"]["index_topk"] < max(len(r["teacher_forced"]["ids"]) for r in recs):
            variants["half_split_rope_indexer_only"] = variant(patch=indexer_only)
            variants["dense_attention_index_topk_4096"] = variant(overrides={"index_topk": 4096})
        sanity["indexer"] = indexer_stats(model, all_tf_seqs)
    else:
        variants["no_group_limit_topk_group_eq_n_group"] = variant(overrides={"topk_group": spec["config"]["n_group"]})
        variants["no_yarn_default_rope"] = variant(
            overrides={"rope_parameters": {"rope_type": "default", "rope_theta": spec["config"]["rope_parameters"]["rope_theta"]}})
        variants["rope_interleave_false"] = variant(overrides={"rope_interleave": False})
    sanity["variants"] = variants

    dbg = debug_dump(model, spec, dbg_ids)
    np_save_file(dbg, os.path.join(d, "debug.safetensors"), metadata={"prompt": json.dumps(dbg_ids)})

    goldens = {
        "schema": SCHEMA,
        "model": name,
        "architecture": "GlmMoeDsaForCausalLM" if spec["arch"] == "glm" else "DeepseekV3ForCausalLM",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "numpy": np.__version__, "python": platform.python_version()},
        "hf": {"dtype": "bfloat16", "attn_implementation": "eager",
               "experts_implementation": model.config._experts_implementation, "device": "cpu", "torch_threads": 1},
        "seed": spec["seed"],
        "checkpoint": {"file": "model.safetensors", "sha256": sha256_file(os.path.join(d, "model.safetensors")),
                       "mtp_layer_index": spec["config"]["num_hidden_layers"]},
        "eos_token_id": spec["eos_token_id"],
        "n_greedy": N_GREEDY,
        "topk": TOPK,
        "prompts": recs,
        "debug": {"file": "debug.safetensors", "ids": dbg_ids},
        "sanity": sanity,
    }
    with open(os.path.join(d, "goldens.json"), "w") as f:
        json.dump(goldens, f, indent=1, sort_keys=False)
        f.write("\n")
    return goldens


VARIANT_ORIG_GLM = mglm.apply_rotary_pos_emb_interleave


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "oracle"))
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    names = [n for n in MODELS if not args.only or n in args.only.split(",")]
    ok = True
    for n in names:
        g = run_model(n, MODELS[n], os.path.abspath(args.out))
        errs = check_goldens(n, MODELS[n], g)
        s = g["sanity"]
        print(f"== {n}: greedy distinct {s['greedy_distinct_tokens']} min margin {s['greedy_min_margin']} "
              f"f32 greedy {s['f32_greedy_agree']} f32 tf {s['f32_teacher_forced_argmax_agree']} "
              f"maxdiff {s['f32_vs_bf16_max_abs_logit_diff']}")
        for k, r in s["variants"].items():
            print(f"   variant {k}: {r}")
        for l, r in s["routing"].items():
            print(f"   routing layer {l}: used {r['experts_used']} min cut {r['min_cut_margin']} "
                  f"{'group changed ' + str(r.get('group_limit_changed_selection')) if 'group_limit_changed_selection' in r else ''}")
        if "indexer" in s:
            print(f"   indexer: {s['indexer']}")
        for e in errs:
            print(f"   FAIL: {e}")
        ok = ok and not errs
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
