#!/usr/bin/env python3
"""Builds the training data of the tiny GLM demo model, offline, from licence-clean text on this
machine plus generated chat samples, tokenized with the project tokenizer.

Sources (see models/glm-tiny-chat/MODEL_CARD.md for the licence notes):
  1. prose: docstrings (module, class, function) of the CPython 3.11 standard library's pure-Python
     modules found next to the running interpreter (`sysconfig.get_paths()["stdlib"]`), licensed
     under the PSF License Agreement (permissive: use, modify, distribute with the notice), skipping
     test suites, site-packages, idlelib, lib2to3 fixtures and any docstring that is not mostly ASCII
     prose. Split train/held-out by a hash of the module path (5% held out).
  2. chat: generated conversations (tools/train/chat_tasks.py) in the GLM chat format.

Output (--out, default build/train-data): train.u16 / heldout_text.u16 / heldout_chat.u16 (uint16
token ids; documents separated by <|endoftext|>), heldout_text.txt / heldout_chat.txt (the held-out
documents as text), manifest.json (counts, sources, sha256).
Deterministic for a given --seed and Python version.

  python3 tools/train/build_data.py [--out build/train-data] [--seed 0] [--chat-docs 120000]
"""
import argparse
import ast
import hashlib
import inspect
import json
import os
import random
import re
import sys
import sysconfig

import numpy as np
from tokenizers import Tokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chat_tasks  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOKENIZER = os.path.join(ROOT, "tests/data/text/glm_tiny/tokenizer.json")
SKIP_DIRS = {"test", "tests", "site-packages", "idlelib", "lib2to3", "turtledemo", "__pycache__",
             "ensurepip", "config-3.11-x86_64-linux-gnu", "tkinter", "pydoc_data"}
EOT = "<|endoftext|>"


def stdlib_files(stdlib):
    out = []
    for d, dirs, files in os.walk(stdlib):
        dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS and not x.startswith("test"))
        for f in sorted(files):
            if f.endswith(".py") and not f.startswith("test_"):
                out.append(os.path.join(d, f))
    return out


def prose_ok(s):
    if len(s) < 120 or len(s) > 6000:
        return False
    if sum(c.isascii() for c in s) < 0.99 * len(s):
        return False
    letters = sum(c.isalpha() or c == " " for c in s)
    if letters < 0.8 * len(s):  # mostly words, not code listings or tables
        return False
    if s.count(">>>") > 0 or s.count("::") > 1:
        return False
    return True


def docstrings(path):
    try:
        tree = ast.parse(open(path, encoding="utf-8").read())
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return []
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            d = ast.get_docstring(node, clean=False)
            if d:
                d = inspect.cleandoc(d)
                d = re.sub(r"[ \t]+\n", "\n", d).strip()
                if prose_ok(d):
                    out.append(d)
    return out


def held_out(key, frac=0.05):
    return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) < frac * 2**32


def encode_docs(tok, docs):
    ids = []
    for enc in tok.encode_batch(docs, add_special_tokens=False):
        ids.extend(enc.ids)
    return np.asarray(ids, dtype=np.uint16)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "build/train-data"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--chat-docs", type=int, default=120000)
    ap.add_argument("--heldout-chat-docs", type=int, default=1000)
    ap.add_argument("--text-repeat", type=int, default=1, help="copies of the prose in train.u16")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    tok = Tokenizer.from_file(TOKENIZER)

    stdlib = sysconfig.get_paths()["stdlib"]
    train_text, held_text, seen = [], [], set()
    files = stdlib_files(stdlib)
    for p in files:
        rel = os.path.relpath(p, stdlib)
        for d in docstrings(p):
            h = hashlib.sha256(d.encode()).digest()
            if h in seen:
                continue
            seen.add(h)
            (held_text if held_out(rel) else train_text).append(d + EOT)

    r = random.Random(args.seed)
    chats = [chat_tasks.conversation(r) for _ in range(args.chat_docs)]
    rh = random.Random(args.seed + 1_000_003)
    held_chats = [chat_tasks.conversation(rh) for _ in range(args.heldout_chat_docs)]
    train_set = set(chats)
    held_chats = [c for c in held_chats if c not in train_set]  # truly unseen conversations

    docs = [(d, "text") for d in train_text * args.text_repeat] + [(c, "chat") for c in chats]
    random.Random(args.seed + 7).shuffle(docs)
    train = encode_docs(tok, [d for d, _ in docs])
    ht = encode_docs(tok, held_text)
    hc = encode_docs(tok, held_chats)
    n_text = int(sum(len(e.ids) for e in tok.encode_batch(train_text, add_special_tokens=False)))
    for name, arr in (("train.u16", train), ("heldout_text.u16", ht), ("heldout_chat.u16", hc)):
        arr.tofile(os.path.join(args.out, name))
    # the held-out documents as text too (moe mtp --text-file; tests/data/train/ keeps a copy)
    for name, docs in (("heldout_text.txt", held_text), ("heldout_chat.txt", held_chats)):
        with open(os.path.join(args.out, name), "w", encoding="utf-8") as f:
            f.write("".join(docs))
    manifest = {
        "seed": args.seed,
        "tokenizer": os.path.relpath(TOKENIZER, ROOT),
        "python": sys.version.split()[0],
        "sources": {
            "cpython_stdlib_docstrings": {
                "licence": "PSF-2.0 (Python Software Foundation License Agreement, permissive)",
                "path": stdlib, "files_scanned": len(files),
                "train_docstrings": len(train_text), "heldout_docstrings": len(held_text),
                "train_tokens": n_text * args.text_repeat},
            "generated_chat": {"licence": "generated by tools/train/chat_tasks.py (this repository)",
                               "train_conversations": len(chats), "heldout_conversations": len(held_chats),
                               "train_tokens": int(len(train) - n_text * args.text_repeat)},
        },
        "tokens": {"train": int(len(train)), "heldout_text": int(len(ht)), "heldout_chat": int(len(hc))},
        "sha256": {n: hashlib.sha256(open(os.path.join(args.out, n), "rb").read()).hexdigest()
                   for n in ("train.u16", "heldout_text.u16", "heldout_chat.u16")},
    }
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
    print(json.dumps(manifest["tokens"]), json.dumps({k: v.get("train_tokens") for k, v in manifest["sources"].items()}))


if __name__ == "__main__":
    main()
