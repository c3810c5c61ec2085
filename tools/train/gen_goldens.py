#!/usr/bin/env python3
"""Hugging Face goldens for the trained demo model (models/glm-tiny-chat): what HF transformers does
with the shipped checkpoint, for the engine's token-exactness test (tests/model/trained_model_test.cc).

Problem: the random-weight oracles (tools/oracle) prove the engine's numerics; this proves the
shipped, trained model runs identically in our engine and in HF (BF16, eager attention, grouped_mm
experts, exactly as tools/oracle/gen_oracle.py runs HF), on chat prompts rendered with the GLM
template and encoded with the model's own tokenizer.

Writes tests/data/model/glm-tiny-chat/goldens.json (schema moestream-oracle-v1 plus "model_dir",
"text" and per-prompt "question"/"answer"), no weights (the engine test opens models/glm-tiny-chat
and checks the checkpoint sha256 recorded here). Greedy runs until a stop id (inclusive) or
--max-new tokens. Prompts whose greedy path has a top1-top2 margin below --min-margin (a near-tie a
BF16-faithful engine may legitimately flip) are reported and left out, like gen_oracle's robust
prompt selection. Deterministic (one torch thread).

  python3 tools/train/gen_goldens.py [--model models/glm-tiny-chat] [--out tests/data/model/glm-tiny-chat]
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
from safetensors.torch import load_file
from tokenizers import Tokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tools/oracle"))
import chat_tasks  # noqa: E402
import oracle_runs  # noqa: E402  (greedy, forward_logits, tf_record, mtp_teacher_forced)
import oracle_specs  # noqa: E402  (SCHEMA, TOPK, NEAR_TIE)
import oracle_weights  # noqa: E402  (load_model; sets 1 torch thread)
import train  # noqa: E402  (MODEL: the exact training config)

# Fixed chat prompts: the demo's task types (the chat test checks the answers) + one with thinking on.
QUESTIONS = [
    ("count", "Count from 3 to 9.", False),
    ("continue", "Continue counting: 11, 12, 13,", False),
    ("day", "What day comes after Monday?", False),
    ("day_before", "What day comes before Friday?", False),
    ("month", "What month comes after March?", False),
    ("add", "What is 2 plus 3?", False),
    ("letter", "What letter comes after C?", False),
    ("capital", "What is the capital of France?", False),
    ("hello", "Say hello in one short sentence.", False),
    ("who", "Who are you?", False),
    ("day_think", "What day comes after Thursday?", True),
    # more candidates of the same kinds, so that enough prompts pass the near-tie filter
    ("count2", "Count from 20 to 25.", False),
    ("next_num", "What number comes after seven?", False),
    ("days", "List the days of the week.", False),
    ("month_before", "What month comes before June?", False),
    ("mul", "What is 3 times 4?", False),
    ("sub", "What is 9 minus 4?", False),
    ("opposite", "What is the opposite of hot?", False),
    ("color", "What color is the sky?", False),
    ("animal", "What sound does a cow make?", False),
    ("thanks", "Thank you!", False),
    ("hi", "Hi", False),
    ("alphabet", "Continue the alphabet: A, B, C,", False),
]
TEXT_PROMPT = "Return a new list containing"


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def greedy_until_stop(model, prompt, stop, n):
    """oracle_runs.greedy, stopping at a stop id, with margins rounded for the goldens file."""
    toks, margins = oracle_runs.greedy(model, prompt, n, stop=stop)
    return toks, [round(m, 6) for m in margins]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=os.path.join(ROOT, "models/glm-tiny-chat"))
    ap.add_argument("--out", default=os.path.join(ROOT, "tests/data/model/glm-tiny-chat"))
    ap.add_argument("--heldout", default=os.path.join(ROOT, "build/train-data/heldout_text.u16"))
    ap.add_argument("--max-new", type=int, default=40)
    ap.add_argument("--min-margin", type=float, default=0.0,
                    help="drop prompts whose greedy path has a smaller top1-top2 margin (0: keep all; exact BF16 "
                         "ties are then broken by the first index, as torch.argmax and the engine do)")
    args = ap.parse_args()

    spec = {"arch": "glm", "config": dict(train.MODEL)}
    model = oracle_weights.load_model(args.model, spec)
    weights = load_file(os.path.join(args.model, "model.safetensors"))
    tok = Tokenizer.from_file(os.path.join(args.model, "tokenizer.json"))
    cfg = json.load(open(os.path.join(args.model, "config.json")))
    stop = set(cfg["eos_token_id"])

    prompts, dropped = [], []
    items = [(n, chat_tasks.prompt_text(q, enable_thinking=th), q) for n, q, th in QUESTIONS]
    items.append(("text", TEXT_PROMPT, None))
    for name, text, q in items:
        ids = tok.encode(text, add_special_tokens=False).ids
        toks, margins = greedy_until_stop(model, ids, stop, args.max_new)
        toks2, _ = greedy_until_stop(model, ids, stop, args.max_new)
        assert toks == toks2, "HF greedy is not deterministic"
        answer = tok.decode(toks, skip_special_tokens=True)
        print(f"{name:10s} margin {min(margins):7.3f}  {q or text!r} -> {answer!r}", flush=True)
        if args.min_margin > 0 and min(margins) < args.min_margin:
            dropped.append({"name": name, "min_margin": min(margins), "answer": answer})
            continue
        seq = ids + toks
        logits = oracle_runs.forward_logits(model, seq)
        rec = oracle_runs.tf_record(logits, seq)
        mtp = oracle_runs.mtp_teacher_forced(spec, weights, model, seq)
        # draft acceptance proxy on this sequence: MTP draft at slot j == main argmax at j+1
        acc = sum(int(mtp["draft_argmax"][j] == rec["argmax"][j + 1]) for j in range(len(seq) - 2))
        prompts.append({"name": name, "question": q, "text": text, "ids": ids,
                        "greedy": {"tokens": toks, "margin": margins}, "answer": answer,
                        "teacher_forced": dict(ids=seq, **rec),
                        "mtp_teacher_forced": dict(ids=seq, **mtp), "mtp_agree": [acc, len(seq) - 2]})

    # held-out prose window (teacher-forced only; never seen in training)
    held = np.fromfile(args.heldout, dtype=np.uint16)[:96].astype(int).tolist()
    hl = oracle_runs.forward_logits(model, held)
    held_rec = dict(ids=held, **oracle_runs.tf_record(hl, held))

    g = {
        "schema": oracle_specs.SCHEMA,
        "model": "glm-tiny-chat",
        "model_dir": os.path.relpath(args.model, ROOT),
        "architecture": "GlmMoeDsaForCausalLM",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "numpy": np.__version__, "python": platform.python_version()},
        "hf": {"dtype": "bfloat16", "attn_implementation": "eager",
               "experts_implementation": model.config._experts_implementation, "device": "cpu",
               "torch_threads": torch.get_num_threads()},
        "checkpoint": {"file": "model.safetensors", "sha256": sha256_file(os.path.join(args.model, "model.safetensors")),
                       "mtp_layer_index": cfg["num_hidden_layers"]},
        "eos_token_id": sorted(stop),
        "topk": oracle_specs.TOPK,
        "prompts": prompts,
        "heldout_teacher_forced": held_rec,
        "dropped_near_tie_prompts": dropped,
        "sanity": {"near_tie_margin": oracle_specs.NEAR_TIE, "min_margin_required": args.min_margin},
    }
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "goldens.json"), "w") as f:
        json.dump(g, f, indent=1)
        f.write("\n")
    print(f"wrote {args.out}/goldens.json: {len(prompts)} prompts ({len(dropped)} dropped at near-ties)")


if __name__ == "__main__":
    main()
