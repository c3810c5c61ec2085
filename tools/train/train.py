#!/usr/bin/env python3
"""Trains moestream's tiny GLM-5-architecture demo model (GlmMoeDsaForCausalLM) on CPU.

Problem: the default model of the repo must answer in English and exercise every GLM-5 part (MLA,
DSA indexer with shared top-k layers, dense + MoE layers with a shared expert and a biased sigmoid
router, the MTP layer) while training in about an hour on 2 shared CPU cores. ~6.9M parameters,
1.5k tokens per step.

What is trained, and how:
  - main model: HF transformers' GlmMoeDsaForCausalLM in float32 (eager attention), next-token
    cross-entropy on packed windows of the data from build_data.py.
  - MTP layer (HF does not run it): our module with docs/MODEL.md section 5's structure and tensor names
    (enorm, hnorm, eh_proj [H, 2H] on [enorm(e); hnorm(h)], one full GLM decoder layer with its own
    indexer, shared_head.norm, the shared lm_head), loss = next-next-token cross-entropy x --mtp-weight.
    h = the main model's final-normed hidden state (vLLM's convention, as tools/oracle/gen_oracle.py).
  - DSA indexers: HF's indexer is @no_grad (selection is not differentiable). As in DeepSeek-V3.2,
    each indexer is trained by a KL loss from its layer's attention distribution (summed over heads)
    to softmax(index scores), on detached inputs so it does not move the main model: first
    --dense-steps with dense attention (every key selected), then sparse with index_topk, KL on the
    selected keys.
  - Router: aux-loss-free balancing (DeepSeek-V3): after each step e_score_correction_bias +=
    --bias-rate * sign(mean load - expert load), per MoE layer (incl. the MTP layer).
Outputs in --out: train_log.jsonl (per step), eval.json, ckpt.pt (resumable, every --ckpt-every
steps), hf/ (the exported HF checkpoint: config.json + model.safetensors, BF16 with per-expert tensor
names and the MTP layer as model.layers.{L}.*, router bias F32), written at every checkpoint so an
early stop still leaves a model. Deterministic from --seed (one process, fixed thread count).

  python3 tools/train/train.py --data build/train-data --out build/train-run --steps 200
"""
import argparse
import copy
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from transformers import GlmMoeDsaConfig, GlmMoeDsaForCausalLM
from transformers.models.glm_moe_dsa import modeling_glm_moe_dsa as mglm

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools", "oracle"))
from oracle_specs import GLM_ARCH  # noqa: E402

VOCAB = 12288
EOS_IDS = [12256, 12263, 12265]  # <|endoftext|>, <|user|>, <|observation|>
PAD_ID = 12256

MODEL = dict(
    GLM_ARCH,  # GLM-5's settings besides sizes, as every tiny GLM model (tools/oracle/oracle_specs.py)
    # sizes: V, H, I (dense MLP), Im (routed expert); 4 layers, the first dense
    vocab_size=VOCAB, hidden_size=128, intermediate_size=384, moe_intermediate_size=64,
    num_hidden_layers=4, first_k_dense_replace=1,
    # MLA: nh heads (nh KV heads), rq, rkv, dn, dr, dv
    num_attention_heads=4, num_key_value_heads=4, q_lora_rank=64, kv_lora_rank=48,
    qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32,
    # MoE: E routed experts, K per token
    n_routed_experts=32, num_experts_per_tok=4,
    # DSA indexer: ih heads of id, top-k, full/shared layers
    index_n_heads=4, index_head_dim=32, index_topk=16, indexer_types=["full", "shared", "full", "shared"],
    max_position_embeddings=2048, rms_norm_eps=1e-5,
    # pad_token_id (None, from GLM_ARCH) is set to <|endoftext|> in the exported config; None here so its row trains
    initializer_range=0.02,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
)


# --------------------------------------------------------------------------------------------------
# Trainable indexer (same math as HF's GlmMoeDsaIndexer.forward, with grad, inputs detached)
# --------------------------------------------------------------------------------------------------
_HF_INDEXER_FORWARD = mglm.GlmMoeDsaIndexer.forward
_HF_ATTN_FORWARD = mglm.GlmMoeDsaAttention.forward


def indexer_forward_train(self, hidden_states, q_resid, position_embeddings, attention_mask, position_ids,
                          cache=None):
    hs, qr = hidden_states.detach(), q_resid.detach()
    b, s, _ = hs.shape
    cos, sin = position_embeddings
    q = self.wq_b(qr).view(b, s, self.n_heads, self.head_dim)
    q_rot, q_pass = torch.split(q, [self.qk_rope_head_dim, self.head_dim - self.qk_rope_head_dim], dim=-1)
    k = self.k_norm(self.wk(hs)).unsqueeze(2)
    k_rot, k_pass = torch.split(k, [self.qk_rope_head_dim, self.head_dim - self.qk_rope_head_dim], dim=-1)
    q_rot, k_rot = mglm.apply_rotary_pos_emb_interleave(q_rot, k_rot, cos, sin, unsqueeze_dim=2)
    q = torch.cat([q_rot, q_pass], dim=-1)
    k = torch.cat([k_rot, k_pass], dim=-1).squeeze(2)
    scores = F.relu(torch.matmul(q.float(), k.transpose(-1, -2).float().unsqueeze(1)) * self.softmax_scale)
    w = self.weights_proj(hs).float() * (self.n_heads ** -0.5)
    index_scores = torch.matmul(w.unsqueeze(-2), scores).squeeze(-2) + attention_mask
    topk = min(self.index_topk, index_scores.shape[-1])
    idx = index_scores.detach().topk(topk, dim=-1).indices
    self._train_scores = index_scores
    self._train_topk = idx
    return idx.to(torch.int32)


def attn_forward_train(self, *args, **kwargs):
    out, weights, topk = _HF_ATTN_FORWARD(self, *args, **kwargs)
    if self.indexer is not None:
        self._train_attn = weights
    return out, weights, topk


def set_train_patches(on):
    mglm.GlmMoeDsaIndexer.forward = indexer_forward_train if on else _HF_INDEXER_FORWARD
    mglm.GlmMoeDsaAttention.forward = attn_forward_train if on else _HF_ATTN_FORWARD


def indexer_kl(attn_modules):
    """KL(attention distribution summed over heads || softmax(index scores)) on the selected keys."""
    total, n = 0.0, 0
    for m in attn_modules:
        s = m.indexer._train_scores
        p = m._train_attn.detach().float().sum(1)
        sel = torch.zeros_like(s, dtype=torch.bool).scatter_(-1, m.indexer._train_topk, True)
        p = p * sel
        p = p / p.sum(-1, keepdim=True).clamp_min(1e-12)
        logq = torch.log_softmax(s.masked_fill(~sel, -1e30), dim=-1)
        kl = torch.where(p > 0, p * (torch.log(p.clamp_min(1e-12)) - logq), torch.zeros_like(p)).sum(-1)
        total = total + kl.mean()
        n += 1
    return total / max(n, 1)


# --------------------------------------------------------------------------------------------------
# MTP layer (docs/MODEL.md section 5; names as in the checkpoint: model.layers.{L}.*)
# --------------------------------------------------------------------------------------------------
def mtp_config(cfg):
    d = copy.deepcopy(MODEL)
    d["num_hidden_layers"] = cfg.num_hidden_layers + 1
    d["indexer_types"] = list(MODEL["indexer_types"]) + ["full"]
    c = GlmMoeDsaConfig(**d)
    c._attn_implementation = cfg._attn_implementation
    c._experts_implementation = cfg._experts_implementation
    return c


class MtpLayer(torch.nn.Module):
    def __init__(self, cfg):
        super().__init__()
        L = cfg.num_hidden_layers
        c = mtp_config(cfg)
        H = cfg.hidden_size
        self.enorm = mglm.GlmMoeDsaRMSNorm(H, cfg.rms_norm_eps)
        self.hnorm = mglm.GlmMoeDsaRMSNorm(H, cfg.rms_norm_eps)
        self.eh_proj = torch.nn.Linear(2 * H, H, bias=False)
        self.layer = mglm.GlmMoeDsaDecoderLayer(c, L)
        self.shared_head_norm = mglm.GlmMoeDsaRMSNorm(H, cfg.rms_norm_eps)

    def forward(self, model, h, next_ids, mask, pos, rows=None):
        """h: final-normed main hidden states [B, N, H] of positions 0..N-1; next_ids: ids 1..N.
        Returns logits [B, N, V] predicting ids 2..N+1 (RoPE position j for slot j), or only the
        slots in `rows` (the vocabulary projection dominates the cost on CPU)."""
        e = model.model.embed_tokens(next_ids)
        z = self.eh_proj(torch.cat([self.enorm(e), self.hnorm(h)], dim=-1))
        pe = model.model.rotary_emb(z, pos)
        u, _ = self.layer(z, attention_mask=mask, position_ids=pos, position_embeddings=pe)
        if rows is not None:
            u = u[:, rows]
        return model.lm_head(self.shared_head_norm(u))


def init_mtp(mtp, std):
    for mod in mtp.modules():
        if isinstance(mod, torch.nn.Linear):
            torch.nn.init.normal_(mod.weight, 0.0, std)
        elif isinstance(mod, torch.nn.LayerNorm):
            torch.nn.init.ones_(mod.weight)
            torch.nn.init.zeros_(mod.bias)
        elif isinstance(mod, mglm.GlmMoeDsaRMSNorm):
            torch.nn.init.ones_(mod.weight)
        elif isinstance(mod, mglm.GlmMoeDsaTopkRouter):
            torch.nn.init.normal_(mod.weight, 0.0, std)
            torch.nn.init.zeros_(mod.e_score_correction_bias)
        elif isinstance(mod, mglm.GlmMoeDsaExperts):
            torch.nn.init.normal_(mod.gate_up_proj, 0.0, std)
            torch.nn.init.normal_(mod.down_proj, 0.0, std)


def causal_mask(n, dtype=torch.float32):
    return torch.full((n, n), torch.finfo(dtype).min, dtype=dtype).triu(1)[None, None]


# --------------------------------------------------------------------------------------------------
# Export: HF checkpoint in the layout of the real releases (docs/MODEL.md section 3)
# --------------------------------------------------------------------------------------------------
def layer_tensors(prefix, sd, E):
    out = {}
    for k, v in sd.items():
        if "rotary_emb" in k:
            continue
        if k.endswith("mlp.experts.gate_up_proj"):
            pre = prefix + k[: -len("gate_up_proj")]
            im = v.shape[1] // 2
            for e in range(E):
                out[f"{pre}{e}.gate_proj.weight"] = v[e, :im]
                out[f"{pre}{e}.up_proj.weight"] = v[e, im:]
        elif k.endswith("mlp.experts.down_proj"):
            pre = prefix + k[: -len("down_proj")]
            for e in range(E):
                out[f"{pre}{e}.down_proj.weight"] = v[e]
        else:
            out[prefix + k] = v
    return out


def export_hf(model, mtp, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    cfg = model.config
    E = cfg.n_routed_experts
    L = cfg.num_hidden_layers
    t = layer_tensors("", model.state_dict(), E)
    t.update(layer_tensors(f"model.layers.{L}.", mtp.layer.state_dict(), E))
    p = f"model.layers.{L}."
    t[p + "enorm.weight"] = mtp.enorm.weight
    t[p + "hnorm.weight"] = mtp.hnorm.weight
    t[p + "eh_proj.weight"] = mtp.eh_proj.weight
    t[p + "shared_head.norm.weight"] = mtp.shared_head_norm.weight
    ts = {}
    for k, v in t.items():
        v = v.detach().contiguous()
        ts[k] = v.float().contiguous() if k.endswith("e_score_correction_bias") else v.to(torch.bfloat16).contiguous()
    save_file({k: ts[k] for k in sorted(ts)}, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    c = GlmMoeDsaConfig(**MODEL)
    c.architectures = ["GlmMoeDsaForCausalLM"]
    c.dtype = "bfloat16"
    c.eos_token_id = EOS_IDS
    c.pad_token_id = PAD_ID
    c.save_pretrained(out_dir)
    j = json.load(open(os.path.join(out_dir, "config.json")))
    j.pop("transformers_version", None)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(j, f, indent=2, sort_keys=True)
        f.write("\n")


# --------------------------------------------------------------------------------------------------
# Data, eval
# --------------------------------------------------------------------------------------------------
def windows(arr, n, stride):
    return [arr[i:i + n] for i in range(0, len(arr) - n + 1, stride)]


@torch.no_grad()
def evaluate(model, mtp, arr, seq, max_windows=64):
    """Mean next-token loss (perplexity), MTP next-next loss, and the MTP draft acceptance proxy:
    fraction of slots where the MTP argmax equals the main model's argmax for the same token."""
    model.eval(); mtp.eval()
    set_train_patches(False)
    ws = windows(arr, seq + 1, seq)[:max_windows]
    nll = n = mnll = mn = acc = 0.0
    mask = causal_mask(seq)
    pos = torch.arange(seq).unsqueeze(0)
    for w in ws:
        ids = torch.from_numpy(w.astype(np.int64)).unsqueeze(0)
        x, y = ids[:, :seq], ids[:, 1:]
        h = model.model(input_ids=x, use_cache=False).last_hidden_state
        logits = model.lm_head(h)
        nll += F.cross_entropy(logits[0], y[0], reduction="sum").item()
        n += seq
        ml = mtp(model, h[:, :-1], x[:, 1:], causal_mask(seq - 1), pos[:, :-1])
        mnll += F.cross_entropy(ml[0], y[0, 1:], reduction="sum").item()
        mn += seq - 1
        acc += (ml[0].argmax(-1) == logits[0, 1:].argmax(-1)).sum().item()
    model.train(); mtp.train()
    set_train_patches(True)
    return {"loss": nll / n, "ppl": math.exp(nll / n), "mtp_loss": mnll / mn, "mtp_agree": acc / mn,
            "tokens": int(n)}


def lr_at(step, args):
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    t = (step - args.warmup) / max(1, args.steps - args.warmup)
    return args.lr * (args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * min(t, 1.0))))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=os.path.join(ROOT, "build/train-data"))
    ap.add_argument("--out", default=os.path.join(ROOT, "build/train-run"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=12)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--lr", type=float, default=4e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=15)
    ap.add_argument("--weight-decay", type=float, default=0.05)
    ap.add_argument("--mtp-weight", type=float, default=0.3)
    ap.add_argument("--mtp-stride", type=int, default=4, help="MTP loss on every k-th slot (offset = step mod k)")
    ap.add_argument("--dense-steps", type=int, default=20)
    ap.add_argument("--bias-rate", type=float, default=1e-3)
    ap.add_argument("--ckpt-every", type=int, default=50)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--experts-impl", default="eager", help="HF experts backend (eager is fastest on CPU here)")
    ap.add_argument("--print-every", type=int, default=10)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--max-minutes", type=float, default=0, help="stop (after a checkpoint) past this wall time")
    ap.add_argument("--stop-at", type=int, default=0,
                    help="stop after this step (schedule still planned for --steps): reproduces a --max-minutes stop")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    os.makedirs(args.out, exist_ok=True)
    train = np.fromfile(os.path.join(args.data, "train.u16"), dtype=np.uint16)
    held = {k: np.fromfile(os.path.join(args.data, f"heldout_{k}.u16"), dtype=np.uint16) for k in ("text", "chat")}

    cfg = GlmMoeDsaConfig(**MODEL)
    cfg._attn_implementation = "eager"
    model = GlmMoeDsaForCausalLM(cfg)
    model.config._attn_implementation = "eager"
    model.config._experts_implementation = args.experts_impl
    mtp = MtpLayer(model.config)
    init_mtp(mtp, cfg.initializer_range)
    params = list(model.parameters()) + list(mtp.parameters())
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    attn_full = [l.self_attn for l in model.model.layers if l.self_attn.indexer is not None] + [mtp.layer.self_attn]
    routers = [l.mlp.gate for l in model.model.layers if isinstance(l.mlp, mglm.GlmMoeDsaMoE)] + [mtp.layer.mlp.gate]
    loads = {}

    def router_hook(mod, inp, out):
        loads[id(mod)] = loads.get(id(mod), 0) + torch.bincount(out[2].reshape(-1), minlength=mod.num_experts)

    for r in routers:
        r.register_forward_hook(router_hook)

    step = 0
    gen = np.random.default_rng(args.seed)
    ck = os.path.join(args.out, "ckpt.pt")
    elapsed0 = 0.0
    if args.resume and os.path.exists(ck):
        st = torch.load(ck, weights_only=False)
        model.load_state_dict(st["model"]); mtp.load_state_dict(st["mtp"]); opt.load_state_dict(st["opt"])
        step = st["step"]; gen = st["gen"]; elapsed0 = st["elapsed"]
        torch.set_rng_state(st["torch_rng"])
        print(f"resumed at step {step}", flush=True)
    set_train_patches(True)
    model.train(); mtp.train()
    S, B = args.seq, args.batch
    mask = causal_mask(S)
    mmask = causal_mask(S - 1)
    pos = torch.arange(S).unsqueeze(0)
    log = open(os.path.join(args.out, "train_log.jsonl"), "a")
    t0 = time.time() - elapsed0
    n_params = sum(p.numel() for p in params)
    print(f"params {n_params} ({sum(p.numel() for p in model.parameters())} main), steps {args.steps}, "
          f"tokens/step {B * S}", flush=True)

    def save(final=False):
        torch.save({"model": model.state_dict(), "mtp": mtp.state_dict(), "opt": opt.state_dict(), "step": step,
                    "gen": gen, "elapsed": time.time() - t0, "torch_rng": torch.get_rng_state(),
                    "args": vars(args)}, ck + ".tmp")
        os.replace(ck + ".tmp", ck)
        export_hf(model, mtp, os.path.join(args.out, "hf"))

    while step < args.steps:
        topk = 10**9 if step < args.dense_steps else cfg.index_topk
        for m in attn_full:
            m.indexer.index_topk = topk
        lr = lr_at(step, args)
        for g in opt.param_groups:
            g["lr"] = lr
        starts = gen.integers(0, len(train) - S - 2, size=B)
        ids = torch.from_numpy(np.stack([train[s:s + S + 1] for s in starts]).astype(np.int64))
        x, y = ids[:, :S], ids[:, 1:]
        loads.clear()
        h = model.model(input_ids=x, attention_mask=None, use_cache=False).last_hidden_state
        logits = model.lm_head(h)
        loss_main = F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
        rows = torch.arange(step % args.mtp_stride, S - 1, args.mtp_stride)
        ml = mtp(model, h[:, :-1], x[:, 1:], mmask, pos[:, :-1], rows)
        loss_mtp = F.cross_entropy(ml.reshape(-1, VOCAB), y[:, 1:][:, rows].reshape(-1))
        loss_kl = indexer_kl(attn_full)
        loss = loss_main + args.mtp_weight * loss_mtp + loss_kl
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        with torch.no_grad():
            for r in routers:
                c = loads[id(r)].float()
                r.e_score_correction_bias += args.bias_rate * torch.sign(c.mean() - c)
        step += 1
        rec = {"step": step, "loss": round(loss_main.item(), 4), "mtp_loss": round(loss_mtp.item(), 4),
               "indexer_kl": round(loss_kl.item(), 4), "lr": lr, "grad_norm": round(float(gn), 3),
               "tokens": step * B * S, "elapsed_s": round(time.time() - t0, 1)}
        log.write(json.dumps(rec) + "\n"); log.flush()
        if step % args.print_every == 0 or step == 1:
            print(json.dumps(rec), flush=True)
        stop = (args.max_minutes and (time.time() - t0) > args.max_minutes * 60) or step == args.stop_at
        if step % args.eval_every == 0 or step == args.steps or stop:
            ev = {k: evaluate(model, mtp, v, S, max_windows=16) for k, v in held.items()}
            ev["step"] = step
            log.write(json.dumps({"eval": ev}) + "\n"); log.flush()
            print("eval", json.dumps(ev), flush=True)
        if step % args.ckpt_every == 0 or step == args.steps or stop:
            save()
        if stop:
            print(f"stopping at step {step}: --max-minutes reached", flush=True)
            break
    ev = {k: evaluate(model, mtp, v, S, max_windows=96) for k, v in held.items()}
    ev.update(step=step, tokens=step * B * S, wall_s=round(time.time() - t0, 1), params=n_params,
              seed=args.seed, args=vars(args))
    with open(os.path.join(args.out, "eval.json"), "w") as f:
        json.dump(ev, f, indent=2)
    print("final", json.dumps(ev), flush=True)


if __name__ == "__main__":
    main()
