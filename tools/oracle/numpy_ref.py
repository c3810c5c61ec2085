#!/usr/bin/env python3
"""NumPy-only reference forward for GlmMoeDsaForCausalLM and DeepseekV3ForCausalLM.

Problem: the HF oracle (gen_oracle.py) needs torch; the C++ engine needs a second, independent reading
of docs/MODEL.md to diff against layer by layer, runnable where only numpy is installed (the default
test path). This file re-implements the forward pass from the spec: MLA with interleaved RoPE, the DSA
lightning indexer (LayerNorm, rope-first split, ReLU-weighted scores, exact top-k, full/shared layers),
the sigmoid router with correction bias and group limit, shared expert, dense MLP, YaRN for DeepSeek,
and the MTP layer. It reads the checkpoint directly (safetensors parsed by hand, BF16 widened to f32).

Two numerics modes:
  f32  (default) every activation stays float32: "what the model means".
  bf16 activations are rounded to BF16 at the points where HF's BF16 eager forward rounds (after every
       projection, norm, elementwise op, RoPE, softmax probabilities; router and indexer scores fp32).
       This reproduces HF's discrete choices (DSA sets at the cut) and is what a BF16-faithful engine
       does.

Contract: pure functions of (checkpoint dir, ids); no global state. Not fast (full recompute per
token) but the oracle models are tiny.

Usage:
  python3 tools/oracle/numpy_ref.py [--data tests/data/oracle] [--mode f32|bf16|both] [--only NAME]
    checks greedy tokens and teacher-forced argmax against goldens.json, and diffs debug.safetensors.
"""

import argparse
import json
import math
import os
import struct
import sys

import numpy as np

# ----------------------------------------------------------------------------------------------
# checkpoint I/O
# ----------------------------------------------------------------------------------------------


def load_safetensors(path):
    """Minimal safetensors reader: returns {name: float32/int array}. BF16 is widened exactly."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        raw = data[base + a:base + b]
        shape = info["shape"]
        dt = info["dtype"]
        if dt == "BF16":
            u = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            arr = u.view(np.float32)
        elif dt == "F32":
            arr = np.frombuffer(raw, dtype="<f4").copy()
        elif dt == "I32":
            arr = np.frombuffer(raw, dtype="<i4").copy()
        elif dt == "I64":
            arr = np.frombuffer(raw, dtype="<i8").copy()
        else:
            raise ValueError(f"{path}: tensor {name}: unsupported dtype {dt}")
        out[name] = arr.reshape(shape)
    return out


def to_bf16(x):
    """Round float32 to the nearest BF16 value (ties to even), returned as float32."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
    nan = np.isnan(x)
    y = r.view(np.float32).copy()
    y[nan] = np.nan
    return y


def ident(x):
    return np.asarray(x, dtype=np.float32)


BF16_MIN = float(np.float32(-3.3895313892515355e38))  # torch.finfo(torch.bfloat16).min

# ----------------------------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------------------------


class Model:
    def __init__(self, d, mode="f32", absorbed=False):
        with open(os.path.join(d, "config.json")) as f:
            self.cfg = json.load(f)
        self.w = load_safetensors(os.path.join(d, "model.safetensors"))
        self.mode = mode
        self.absorbed = absorbed
        self.rb = to_bf16 if mode == "bf16" else ident
        c = self.cfg
        self.arch = "glm" if c["model_type"] == "glm_moe_dsa" else "dsv3"
        self.L = c["num_hidden_layers"]
        self.H = c["hidden_size"]
        self.nh = c["num_attention_heads"]
        self.dn, self.dr, self.dv = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
        self.rq, self.rkv = c["q_lora_rank"], c["kv_lora_rank"]
        self.E, self.K = c["n_routed_experts"], c["num_experts_per_tok"]
        self.eps = c["rms_norm_eps"]
        fk = c["first_k_dense_replace"]
        if self.arch == "glm":
            self.mlp_types = c.get("mlp_layer_types") or (["dense"] * fk + ["sparse"] * (self.L - fk))
            self.indexer_types = c.get("indexer_types") or ["full"] * self.L
        else:
            self.mlp_types = ["dense" if i < fk else "sparse" for i in range(self.L)]
            self.indexer_types = None
        self.inv_freq, self.scaling = self._rope_params()

    # -- RoPE -----------------------------------------------------------------------------------
    def _rope_params(self):
        c = self.cfg
        rp = c.get("rope_parameters") or {}
        theta = float(rp.get("rope_theta", c.get("rope_theta", 10000.0)))
        dim = self.dr
        scaling = (self.dn + self.dr) ** -0.5
        # theta ** (2i/d) correctly rounded to f32 (computed in f64): equals torch's f32 pow here, while
        # numpy's own f32 pow is off by one ulp for theta = 8e6 (and one ulp moves DSA sets)
        expo = (np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)).astype(np.float64)
        pos_freqs = (np.float64(theta) ** expo).astype(np.float32)
        inv = (np.float32(1.0) / pos_freqs).astype(np.float32)
        if rp.get("rope_type", "default") == "yarn":
            factor = float(rp["factor"])
            orig = rp["original_max_position_embeddings"]
            bf, bs = rp.get("beta_fast") or 32, rp.get("beta_slow") or 1

            def corr_dim(nrot):
                return (dim * math.log(orig / (nrot * 2 * math.pi))) / (2 * math.log(theta))
            low = max(math.floor(corr_dim(bf)), 0)
            high = min(math.ceil(corr_dim(bs)), dim - 1)
            if low == high:
                high += 0.001
            ramp = np.clip((np.arange(dim // 2, dtype=np.float32) - low) / (high - low), 0, 1).astype(np.float32)
            extra = (1 - ramp).astype(np.float32)
            inv_inter = (np.float32(1.0) / (np.float32(factor) * pos_freqs)).astype(np.float32)
            inv = (inv_inter * (1 - extra) + inv * extra).astype(np.float32)
            ms, msa = rp.get("mscale"), rp.get("mscale_all_dim")

            def get_mscale(s, m=1.0):
                return 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0
            att = get_mscale(factor, ms) / get_mscale(factor, msa) if (ms and msa) else get_mscale(factor)
            if abs(att - 1.0) > 0:
                raise NotImplementedError("YaRN attention_factor != 1 (cos/sin scaling) not implemented")
            if msa:
                m = get_mscale(factor, msa)
                scaling = scaling * m * m
        elif rp.get("rope_type", "default") != "default":
            raise NotImplementedError(f"rope_type {rp.get('rope_type')}")
        return inv, scaling

    def rope_tables(self, T):
        ang = np.arange(T, dtype=np.float32)[:, None] * self.inv_freq[None, :]  # f32 product, like HF
        ang64 = ang.astype(np.float64)
        return self.rb(np.cos(ang64).astype(np.float32)), self.rb(np.sin(ang64).astype(np.float32))

    def rope(self, x, cos, sin):
        """Interleaved (GPT-J) rotation of the last axis; output in HF's de-interleaved layout
        [rotated evens | rotated odds] (q and k get the same permutation, dot products are unchanged)."""
        rb = self.rb
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return np.concatenate([rb(rb(x1 * cos) - rb(x2 * sin)), rb(rb(x2 * cos) + rb(x1 * sin))], axis=-1)

    def rope_half(self, x, cos, sin):
        """NeoX half-split rotation (DeepSeek rope_interleave=false): pairs (x_i, x_{i+d/2})."""
        rb = self.rb
        h = x.shape[-1] // 2
        x1, x2 = x[..., :h], x[..., h:]
        return np.concatenate([rb(rb(x1 * cos) - rb(x2 * sin)), rb(rb(x2 * cos) + rb(x1 * sin))], axis=-1)

    # -- building blocks ------------------------------------------------------------------------
    def lin(self, x, name):
        return self.rb(x @ self.w[name].T)

    def rmsnorm(self, x, name, eps):
        var = np.mean(x.astype(np.float32) ** 2, axis=-1, keepdims=True)
        y = self.rb(x / np.sqrt(var + np.float32(eps)))
        return self.rb(self.w[name] * y)

    def silu(self, x):
        return self.rb(x / (1 + np.exp(-x)))

    def mlp(self, x, p):
        g = self.lin(x, p + "gate_proj.weight")
        u = self.lin(x, p + "up_proj.weight")
        return self.lin(self.rb(self.silu(g) * u), p + "down_proj.weight")

    # -- attention ------------------------------------------------------------------------------
    def indexer(self, x, cq, cos, sin, p, topk):
        """DSA lightning indexer: returns [T, T] boolean 'selected' matrix (causal part)."""
        c = self.cfg
        ih, idd, dr = c["index_n_heads"], c["index_head_dim"], self.dr
        T = x.shape[0]
        q = self.lin(cq, p + "indexer.wq_b.weight").reshape(T, ih, idd)
        k = self.lin(x, p + "indexer.wk.weight")
        mu = k.mean(-1, keepdims=True)
        var = ((k - mu) ** 2).mean(-1, keepdims=True)
        rstd = np.float32(1.0) / np.sqrt(var + np.float32(1e-6))
        k = self.rb((k * rstd - rstd * mu) * self.w[p + "indexer.k_norm.weight"] + self.w[p + "indexer.k_norm.bias"])
        self.last_k_norm = k
        q = np.concatenate([self.rope(q[..., :dr], cos[:, None, :], sin[:, None, :]), q[..., dr:]], -1)
        k = np.concatenate([self.rope(k[..., :dr], cos, sin), k[..., dr:]], -1)
        sc = np.maximum(np.einsum("shd,td->sht", q, k) * np.float32(idd ** -0.5), 0)  # fp32
        # HF loaded with dtype=bfloat16 keeps weights_proj in BF16 (_keep_in_fp32_modules only applies to
        # fp16 loads), so the head weights are a BF16 projection, widened, then scaled in fp32
        wts = self.lin(x, p + "indexer.weights_proj.weight") * np.float32(ih ** -0.5)
        iscore = np.einsum("sh,sht->st", wts, sc).astype(np.float32)
        causal = np.tril(np.ones((T, T), dtype=bool))
        iscore = np.where(causal, iscore, -np.inf)
        sel = np.zeros((T, T), dtype=bool)
        kk = min(topk, T)
        for s in range(T):
            n_causal = s + 1
            if n_causal <= kk:
                sel[s, :n_causal] = True
            else:
                # exact top-k over causal keys (ties: lowest index first, like a stable sort)
                order = np.argsort(-iscore[s, :n_causal], kind="stable")[:kk]
                sel[s, order] = True
        return sel

    def attention(self, x, l, cos, sin, prev_sel, prefix=None):
        p = prefix or f"model.layers.{l}.self_attn."
        rb = self.rb
        T = x.shape[0]
        nh, dn, dr, dv = self.nh, self.dn, self.dr, self.dv
        cq = self.rmsnorm(self.lin(x, p + "q_a_proj.weight"), p + "q_a_layernorm.weight", 1e-6)
        q = self.lin(cq, p + "q_b_proj.weight").reshape(T, nh, dn + dr)
        kva = self.lin(x, p + "kv_a_proj_with_mqa.weight")
        c = self.rmsnorm(kva[:, :self.rkv], p + "kv_a_layernorm.weight", 1e-6)
        kpe = kva[:, self.rkv:]
        rot = self.rope if (self.arch == "glm" or self.cfg.get("rope_interleave", True)) else self.rope_half
        q_pe = rot(q[..., dn:], cos[:, None, :], sin[:, None, :])
        k_pe = rot(kpe, cos, sin)
        kv = self.lin(c, p + "kv_b_proj.weight").reshape(T, nh, dn + dv)
        k_nope, v = kv[..., :dn], kv[..., dn:]
        Q = np.concatenate([q[..., :dn], q_pe], -1)  # [T, nh, dq]
        Kt = np.concatenate([k_nope, np.broadcast_to(k_pe[:, None, :], (T, nh, dr))], -1)
        allowed = np.tril(np.ones((T, T), dtype=bool))
        sel = None
        if self.arch == "glm":
            if self.indexer_types[l] == "full" if l < self.L else True:
                sel = self.indexer(x, cq, cos, sin, p, self.cfg["index_topk"])
                self.last_k_norm_layer = l
            else:
                if prev_sel is None:
                    raise ValueError(f"layer {l}: shared indexer layer without a preceding full layer")
                sel = prev_sel
            allowed = allowed & sel
        if not self.absorbed:
            s = rb(rb(np.einsum("shd,thd->hst", Q, Kt)) * np.float32(self.scaling))
        else:
            # absorbed (latent) form, docs/MODEL.md §4.3: score = (q_nope W_UK) . c + q_pe . k_pe, never
            # expanding per-head keys; values are applied after the softmax through W_UV.
            Wkvb = self.w[p + "kv_b_proj.weight"].reshape(nh, dn + dv, self.rkv)
            # the core (q_abs, scores, probabilities, latent output) stays f32: rounding q_abs or the
            # latent output to BF16 changes greedy tokens on these goldens (see README)
            q_abs = np.einsum("shd,hdr->shr", q[..., :dn], Wkvb[:, :dn, :])
            s = np.einsum("shr,tr->hst", q_abs, c) + np.einsum("shd,td->hst", q_pe, k_pe)
            s = s * np.float32(self.scaling)
        s = np.where(allowed[None], s, np.float32(BF16_MIN))
        s = s - s.max(-1, keepdims=True)
        e = np.exp(s)
        P = e / e.sum(-1, keepdims=True)
        if not self.absorbed:
            P = rb(P)
            o = rb(np.einsum("hst,thd->shd", P, v)).reshape(T, nh * dv)
        else:
            o_lat = np.einsum("hst,tr->shr", P, c)
            o = rb(np.einsum("shr,hdr->shd", o_lat, Wkvb[:, dn:, :])).reshape(T, nh * dv)
        return self.lin(o, p + "o_proj.weight"), sel

    # -- MoE ------------------------------------------------------------------------------------
    def route(self, x, p):
        """Returns (indices [T,K], weights [T,K]) exactly as docs/MODEL.md §4.7."""
        c = self.cfg
        logits = (x.astype(np.float32) @ self.w[p + "gate.weight"].T).astype(np.float32)
        s = (1 / (1 + np.exp(-logits))).astype(np.float32)
        sc = s + self.w[p + "gate.e_score_correction_bias"]
        ng, tg = c["n_group"], c["topk_group"]
        T = x.shape[0]
        idx = np.zeros((T, self.K), dtype=np.int64)
        for t in range(T):
            v = sc[t].copy()
            if ng > 1:
                g = v.reshape(ng, -1)
                gs = np.sort(g, axis=-1)[:, -2:].sum(-1)
                keep = np.argsort(-gs, kind="stable")[:tg]
                mask = np.zeros(ng, dtype=bool)
                mask[keep] = True
                v = np.where(np.repeat(mask, self.E // ng), v, -np.inf)
            idx[t] = np.argsort(-v, kind="stable")[: self.K]
        wts = np.take_along_axis(s, idx, -1)
        if c.get("norm_topk_prob", True):
            wts = wts / (wts.sum(-1, keepdims=True) + np.float32(1e-20))
        wts = (wts * np.float32(c["routed_scaling_factor"])).astype(np.float32)
        return idx, wts, logits

    def moe(self, x, p):
        idx, wts, logits = self.route(x, p)
        T = x.shape[0]
        acc = np.zeros((T, self.H), dtype=np.float32)  # fp32 accumulation over the K slots (HF grouped_mm)
        for e in np.unique(idx):
            rows, slots = np.nonzero(idx == e)
            y = self.mlp(x[rows], f"{p}experts.{e}.")
            acc[rows] += y * wts[rows, slots][:, None]
        routed = self.rb(acc)
        shared = self.mlp(x, p + "shared_experts.")
        return self.rb(routed + shared), (idx, wts, logits)

    # -- full forward ---------------------------------------------------------------------------
    def decoder_layer(self, h, l, cos, sin, prev_sel, trace, prefix=None):
        p = prefix or f"model.layers.{l}."
        rb = self.rb
        a = self.rmsnorm(h, p + "input_layernorm.weight", self.eps)
        att, sel = self.attention(a, l, cos, sin, prev_sel, prefix=p + "self_attn.")
        h = rb(h + att)
        b = self.rmsnorm(h, p + "post_attention_layernorm.weight", self.eps)
        if l >= self.L or self.mlp_types[l] == "sparse":
            m, r = self.moe(b, p + "mlp.")
            if trace is not None:
                trace[f"layers.{l}.router"] = r
        else:
            m = self.mlp(b, p + "mlp.")
        h = rb(h + m)
        if trace is not None:
            trace[f"layers.{l}.attn.out"] = att
            trace[f"layers.{l}.mlp.out"] = m
            trace[f"layers.{l}.output"] = h
            if sel is not None:
                trace[f"layers.{l}.dsa_selected"] = sel
            if getattr(self, "last_k_norm_layer", None) == l:
                trace[f"layers.{l}.indexer.k_norm"] = self.last_k_norm
        return h, sel

    def forward(self, ids, trace=None):
        self.last_k_norm_layer = None
        """Logits [T, V] (f32) and the final-normed hidden states."""
        ids = np.asarray(ids)
        V = self.cfg["vocab_size"]
        if ids.min() < 0 or ids.max() >= V:
            raise ValueError(f"token id outside the vocabulary [0, {V})")
        h = self.w["model.embed_tokens.weight"][ids]
        cos, sin = self.rope_tables(len(ids))
        sel = None
        for l in range(self.L):
            h, sel = self.decoder_layer(h, l, cos, sin, sel, trace)
        y = self.rmsnorm(h, "model.norm.weight", self.eps)
        if trace is not None:
            trace["final_norm"] = y
        return self.rb(y @ self.w["lm_head.weight"].T), y

    def mtp_logits(self, ids):
        """MTP teacher-forced drafts (docs/MODEL.md §5, vLLM convention): slot j uses the final-normed
        hidden state h_j and the embedding of ids[j+1]; returns logits predicting ids[j+2]."""
        L = self.L
        p = f"model.layers.{L}."
        _, y = self.forward(ids)
        ids = np.asarray(ids)
        e = self.w["model.embed_tokens.weight"][ids[1:]]
        z = np.concatenate([self.rmsnorm(e, p + "enorm.weight", self.eps),
                            self.rmsnorm(y[:-1], p + "hnorm.weight", self.eps)], -1)
        z = self.lin(z, p + "eh_proj.weight")
        cos, sin = self.rope_tables(z.shape[0])
        u, _ = self.decoder_layer(z, L, cos, sin, None, None, prefix=p)
        u = self.rmsnorm(u, p + "shared_head.norm.weight", self.eps)
        return self.rb(u @ self.w["lm_head.weight"].T)

    def greedy(self, prompt, n):
        seq = list(prompt)
        out = []
        for _ in range(n):
            lg, _ = self.forward(seq)
            t = int(np.argmax(lg[-1]))
            out.append(t)
            seq.append(t)
        return out


# ----------------------------------------------------------------------------------------------
# checks against the goldens
# ----------------------------------------------------------------------------------------------


def check_model(d, mode, verbose=True, decode=False, absorbed=False):
    g = json.load(open(os.path.join(d, "goldens.json")))
    m = Model(d, mode, absorbed)
    near = g["sanity"]["near_tie_margin"]
    res = {"model": g["model"], "mode": mode, "greedy": [], "tf": [], "tf_bad": 0, "mtp": []}
    for pr in g["prompts"]:
        if decode:
            toks = m.greedy(pr["ids"], g["n_greedy"])
        else:
            # one causal forward over prompt + golden tokens: position i's argmax is what greedy decoding
            # would emit after seeing ids[0..i], so this equals step-by-step greedy up to the first miss
            seq = pr["ids"] + pr["greedy"]["tokens"]
            lg, _ = m.forward(seq[:-1])
            toks = [int(t) for t in np.argmax(lg[len(pr["ids"]) - 1:], -1)]
        res["greedy"].append(sum(a == b for a, b in zip(toks, pr["greedy"]["tokens"])))
        tf = pr["teacher_forced"]
        lg, _ = m.forward(tf["ids"])
        am = np.argmax(lg, -1)
        agree = int((am == np.array(tf["argmax"])).sum())
        bad = int(sum(1 for i, a in enumerate(am) if a != tf["argmax"][i] and tf["margin"][i] >= near))
        res["tf"].append([agree, len(am)])
        res["tf_bad"] += bad
        mt = pr["mtp_teacher_forced"]
        ml = m.mtp_logits(mt["ids"])
        ma = np.argmax(ml, -1)
        mbad = sum(1 for i, a in enumerate(ma) if a != mt["draft_argmax"][i] and mt["margin"][i] >= near)
        res["mtp"].append([int((ma == np.array(mt["draft_argmax"])).sum()), len(mt["draft_argmax"]), mbad])
    # layer-by-layer diff on the debug prompt
    dbg = load_safetensors(os.path.join(d, g["debug"]["file"]))
    trace = {}
    lg, _ = m.forward(g["debug"]["ids"], trace)
    diffs = {}
    for l in range(m.L):
        k = f"layers.{l}.output"
        ref = dbg[k]
        diffs[k] = float(np.abs(trace[k] - ref).max() / (np.abs(ref).max() + 1e-30))
        if f"layers.{l}.router" in trace:
            idx = np.sort(trace[f"layers.{l}.router"][0], -1)
            diffs[f"layers.{l}.router_sets_equal"] = bool((idx == dbg[f"layers.{l}.router.topk_idx"]).all())
        if f"layers.{l}.indexer.k_norm" in trace:
            ref = dbg[f"layers.{l}.indexer.k_norm"]
            diffs[f"layers.{l}.indexer.k_norm"] = float(np.abs(trace[f"layers.{l}.indexer.k_norm"] - ref).max())
        if f"layers.{l}.dsa_selected" in trace:
            sel = trace[f"layers.{l}.dsa_selected"]
            ref_sets = dbg[f"layers.{l}.attn.topk_indices"]
            ok = all(set(np.nonzero(sel[s])[0].tolist()) == set(x for x in ref_sets[s].tolist() if x <= s)
                     for s in range(sel.shape[0]))
            diffs[f"layers.{l}.dsa_sets_equal"] = ok
    diffs["logits_max_abs"] = float(np.abs(lg - dbg["logits"]).max())
    res["debug"] = diffs
    if verbose:
        print(json.dumps(res))
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                                   "tests", "data", "oracle"))
    ap.add_argument("--mode", default="both", choices=["f32", "bf16", "both"])
    ap.add_argument("--only", default="")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--decode", action="store_true", help="greedy by step-by-step decoding (slow)")
    ap.add_argument("--absorbed", action="store_true", help="MLA in the absorbed latent form (informational)")
    args = ap.parse_args()
    modes = ["f32", "bf16"] if args.mode == "both" else [args.mode]
    ok = True
    for name in sorted(os.listdir(args.data)):
        if args.only and name not in args.only.split(","):
            continue
        d = os.path.join(args.data, name)
        if not os.path.exists(os.path.join(d, "goldens.json")):
            continue
        acceptance = json.load(open(os.path.join(d, "goldens.json")))["sanity"]["prompt_acceptance"]
        for mode in modes:
            r = check_model(d, mode, verbose=args.verbose, decode=args.decode, absorbed=args.absorbed)
            good = all(x == 32 for x in r["greedy"]) and r["tf_bad"] == 0
            # f32 is only expected to match where the goldens were selected to be f32-robust (glm-dsa's
            # top-8 DSA sets flip under f32-vs-BF16 noise; see README)
            required = (mode == "bf16" or acceptance.startswith("f32")) and not args.absorbed
            verdict = "OK" if good else ("MISMATCH" if required else "differs (expected, informational)")
            print(f"{name} [{mode}]: greedy {r['greedy']} teacher-forced {r['tf']} non-near-tie mismatches "
                  f"{r['tf_bad']} mtp [agree, total, non-near-tie] {r['mtp']} debug {r['debug']} -> {verdict}")
            ok = ok and (good or not required)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
