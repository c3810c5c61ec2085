"""Checks on the oracle's choices: a prompt is accepted only where an alternative numerics agrees with HF
BF16 (robust), the discrete choices keep a margin (gaps_ok), NumPy's independent reference agrees
(numpy_ok); and the hard requirements on a model's recorded behaviour (check_goldens). Part of
tools/oracle/gen_oracle.py."""

import numpy as np
import torch

from oracle_runs import candidate_stream, decisions, forward_logits, greedy, indexer_stats, routing_stats
from oracle_specs import MIN_INDEX_REL_GAP, MIN_ROUTER_GAP, N_TF_EXTRA, NEAR_TIE


def count_diff(a, b):
    return int(sum(1 for x, y in zip(a, b) if x != y))


def gaps_ok(model, seqs):
    spec_cfg = model.config
    r = routing_stats(model, {"config": {"n_routed_experts": spec_cfg.n_routed_experts,
                                         "num_experts_per_tok": spec_cfg.num_experts_per_tok,
                                         "n_group": spec_cfg.n_group, "topk_group": spec_cfg.topk_group}}, seqs)
    if any(v["min_cut_margin"] < MIN_ROUTER_GAP for v in r.values()):
        return False
    if spec_cfg.model_type == "glm_moe_dsa":
        ix = indexer_stats(model, seqs)
        if any(v["min_rel_cut_gap"] < MIN_INDEX_REL_GAP for v in ix.values()):
            return False
    return True


def robust(model, alt, spec, p, tail):
    """Accept a candidate prompt only if an alternative numerics alt = (model, context) agrees with HF
    BF16. glm-short/deepseek-v3: alt = HF in f32 (same BF16-valued weights), mode "decisions": every
    discrete choice (expert sets, causal DSA sets) and every greedy token agree. glm-dsa: f32 flips DSA
    sets (top-8 of ~80 keys) in every candidate, so alt = HF BF16 with an f32 attention core (AttnF32)
    and mode "tokens": greedy tokens agree and teacher-forced argmaxes agree wherever the BF16 margin
    is at least NEAR_TIE. Exact BF16 logit ties on the greedy path are always rejected."""
    mode = spec["robust_mode"]
    am, ctx = alt
    if not gaps_ok(model, [p + tail]):
        return None
    # cheapest checks first; the accepted candidate does not depend on the order
    if mode == "decisions":
        ref = decisions(model, p + tail)
        with ctx():
            if decisions(am, p + tail) != ref:
                return None
    else:
        lg = forward_logits(model, p + tail)
        with ctx():
            lg2 = forward_logits(am, p + tail)
        top2 = torch.topk(lg, 2, -1).values
        bad = (torch.argmax(lg, -1) != torch.argmax(lg2, -1)) & ((top2[:, 0] - top2[:, 1]) >= NEAR_TIE)
        if bool(bad.any()):
            return None
    toks, margins = greedy(model, p)
    if spec["eos_token_id"][0] in toks or min(margins) <= 0.0:
        return None
    if mode == "decisions":
        ref = decisions(model, p + toks)
        with ctx():
            if decisions(am, p + toks) != ref:
                return None
    with ctx():
        if greedy(am, p)[0] != toks:
            return None
    if not gaps_ok(model, [p + toks]):
        return None
    if not numpy_ok(model, spec, p, toks, tail):
        return None
    return toks, margins


def numpy_ok(model, spec, p, toks, tail):
    """The engine's absorbed MLA path reassociates attention (no BF16 k_nope/v); numpy_ref's absorbed
    forward with HF's BF16 rounding elsewhere (and, for the f32-robust models, fully in f32) must give
    the same greedy tokens and the same teacher-forced argmax outside near-ties. So must numpy_ref's
    explicit BF16 forward, which equals HF up to rare last-bit differences (expert-slot sum order)."""
    lg = forward_logits(model, p + tail)
    ref = torch.argmax(lg, -1).numpy()
    top2 = torch.topk(lg, 2, -1).values
    near = ((top2[:, 0] - top2[:, 1]) < NEAR_TIE).numpy()
    for m in spec["numpy_models"]:
        lg_np, _ = m.forward(p + toks[:-1])
        if [int(t) for t in np.argmax(lg_np[len(p) - 1:], -1)] != toks:
            return False
        a = np.argmax(m.forward(p + tail)[0], -1)
        if bool(((a != ref) & ~near).any()):
            return False
    return True


def make_prompts(spec, model, alt):
    stream = candidate_stream(spec)
    prompts = []
    tried = 0
    for n in spec["prompt_lens"]:
        while True:
            c = next(stream)
            tried += 1
            assert tried < 2000, "no robust prompt found; retune the model"
            p, tail = c[:n], c[n:n + N_TF_EXTRA]
            r = robust(model, alt, spec, p, tail)
            if r is not None:
                prompts.append((p, tail, r[0], r[1]))
                break
    dbg = next(stream)[: spec["debug_prompt_len"]]
    return prompts, dbg, tried


def check_goldens(name, spec, g):
    """Hard requirements on the recorded behaviour; failing ones mean the model needs tuning."""
    s = g["sanity"]
    errs = []
    if any(a != 32 for a in s["greedy_cache_vs_recompute_agree"]):
        errs.append(f"cache vs recompute greedy differ: {s['greedy_cache_vs_recompute_agree']}")
    key = "f32_greedy_agree" if spec["robust_mode"] == "decisions" else "attn_f32_greedy_agree"
    if any(a != 32 for a in s[key]):
        errs.append(f"{key}: {s[key]}")
    if min(s["greedy_distinct_tokens"]) < 8:
        errs.append(f"greedy output degenerate: {s['greedy_distinct_tokens']}")
    for l, r in s["routing"].items():
        if r["experts_used"] < 0.75 * spec["config"]["n_routed_experts"]:
            errs.append(f"layer {l} uses only {r['experts_used']} experts")
    v = s["variants"]
    for k, r in v.items():
        if r["teacher_forced_argmax_changed"] + r["greedy_tokens_changed"] == 0:
            errs.append(f"variant {k} does not change the output")
    if spec["arch"] == "dsv3":
        if not any(r.get("group_limit_changed_selection", 0) > 0 for r in s["routing"].values()):
            errs.append("group limit never changes the expert selection")
    return errs
