#!/usr/bin/env python3
"""Reference fixtures for the checkpoint reader (common/format/dtype.*, safetensors.*).

Everything here comes from implementations independent of ours: ml_dtypes and
numpy for the dtype tables, and Hugging Face's `safetensors` (the Rust writer)
for the interop checkpoints. Output goes to tests/data/format/ and is committed;
rerun only to regenerate (deterministic: fixed seeds).

  python3 tools/format/gen_reader_fixtures.py [--out tests/data/format]

Files:
  fp8_e4m3_table.txt     256 lines "code f32bits": float8_e4m3fn -> float32 (ml_dtypes)
  f16_bf16_hashes.txt    FNV-1a-64 over the float32 bits of all 65536 F16 / BF16 codes
  f32_to_bf16.txt        "f32bits bf16bits" round-to-nearest-even samples (ml_dtypes)
  interop.safetensors    one file, every dtype, FP8 weight + block scales, __metadata__
  interop_expected.safetensors   float32 decode of every tensor in interop.safetensors
  interop_sharded/       model.safetensors.index.json + 2 shards; an FP8 weight's
                         scale lives in the other shard
"""
import argparse
import json
import os

import ml_dtypes
import numpy as np
from safetensors.numpy import save_file

FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3


def fnv1a64(data: bytes) -> int:
    h = FNV_OFFSET
    for b in data:
        h ^= b
        h = (h * FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return h


def fp8_table(out):
    codes = np.arange(256, dtype=np.uint8)
    f = codes.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    bits = f.view(np.uint32)
    with open(os.path.join(out, "fp8_e4m3_table.txt"), "w") as fh:
        fh.write("# float8_e4m3fn code -> float32 bits, value (ml_dtypes %s)\n" % ml_dtypes.__version__)
        for c in range(256):
            fh.write("%02x %08x %r\n" % (c, bits[c], float(f[c])))


def half_hashes(out):
    codes = np.arange(65536, dtype=np.uint16)
    f16 = codes.view(np.float16).astype(np.float32)
    bf16 = codes.view(ml_dtypes.bfloat16).astype(np.float32)
    with open(os.path.join(out, "f16_bf16_hashes.txt"), "w") as fh:
        fh.write("# FNV-1a-64 of the little-endian float32 bits of all 65536 codes, in code order\n")
        fh.write("# (numpy %s float16, ml_dtypes %s bfloat16)\n" % (np.__version__, ml_dtypes.__version__))
        fh.write("F16 %016x\n" % fnv1a64(f16.astype("<f4").tobytes()))
        fh.write("BF16 %016x\n" % fnv1a64(bf16.astype("<f4").tobytes()))


def bf16_rounding(out):
    rng = np.random.default_rng(1234)
    special = [0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001,
               0x7FBFFFFF, 0x00000001, 0x807FFFFF, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F7F8000, 0x7F7F7FFF,
               0x3F808000, 0x3F818000, 0x3F807FFF, 0x3F808001, 0x3F800000, 0x00008000, 0x00018000]
    rand = rng.integers(0, 2**32, size=1500, dtype=np.uint64).astype(np.uint32)
    # Exact ties (low half 0x8000) with both parities, and +-1 around them.
    ties = (rng.integers(0, 2**16, size=500, dtype=np.uint64).astype(np.uint32) << 16) | 0x8000
    near = np.concatenate([ties - 1, ties + 1])
    allbits = np.concatenate([np.array(special, dtype=np.uint32), rand, ties, near]).astype(np.uint32)
    f = allbits.view(np.float32)
    with np.errstate(over="ignore"):
        b = f.astype(ml_dtypes.bfloat16).view(np.uint16)
    with open(os.path.join(out, "f32_to_bf16.txt"), "w") as fh:
        fh.write("# float32 bits -> bfloat16 bits, round to nearest even (ml_dtypes %s)\n" % ml_dtypes.__version__)
        for x, y in zip(allbits, b):
            fh.write("%08x %04x\n" % (x, y))


def fp8_weight(rng, rows, cols):
    """Random FP8 codes (no NaN) and a positive block-scale grid."""
    codes = rng.integers(0, 256, size=(rows, cols), dtype=np.uint16).astype(np.uint8)
    codes[(codes & 0x7F) == 0x7F] = 0x42
    sr, sc = -(-rows // 128), -(-cols // 128)
    scale = (rng.random((sr, sc), dtype=np.float32) * 0.01 + 1e-4).astype(np.float32)
    return codes.view(ml_dtypes.float8_e4m3fn), scale


def dequant(q, scale):
    s = np.repeat(np.repeat(scale, 128, axis=0), 128, axis=1)[: q.shape[0], : q.shape[1]]
    return q.astype(np.float32) * s


def interop(out):
    rng = np.random.default_rng(42)
    q, s = fp8_weight(rng, 129, 257)
    t = {
        "model.layers.0.mlp.down_proj.weight": q,
        "model.layers.0.mlp.down_proj.weight_scale_inv": s,
        "model.norm.weight": rng.standard_normal(64).astype(ml_dtypes.bfloat16),
        "h16": rng.standard_normal((3, 5)).astype(np.float16),
        "f32": rng.standard_normal((2, 3, 4)).astype(np.float32),
        "f64": rng.standard_normal(3).astype(np.float64),
        "i8": rng.integers(-128, 128, size=7).astype(np.int8),
        "u8": rng.integers(0, 256, size=9).astype(np.uint8),
        "i32": rng.integers(-1000000, 1000000, size=4).astype(np.int32),
        "i64": rng.integers(-1000000, 1000000, size=3).astype(np.int64),
        "flags": np.array([True, False, True, True, False]),
        "scalar": np.array(3.5, dtype=np.float32),
        "empty": np.zeros((0, 4), dtype=np.float32),
    }
    meta = {"format": "pt", "moe.note": "interop fixture"}
    save_file(t, os.path.join(out, "interop.safetensors"), metadata=meta)
    exp = {k: v.astype(np.float32) for k, v in t.items()}
    exp["model.layers.0.mlp.down_proj.weight"] = dequant(q, s)
    save_file(exp, os.path.join(out, "interop_expected.safetensors"))

    # Sharded: the FP8 weight sits in shard 1, its scales in shard 2.
    d = os.path.join(out, "interop_sharded")
    os.makedirs(d, exist_ok=True)
    q2, s2 = fp8_weight(rng, 200, 130)
    shard1 = {
        "model.embed_tokens.weight": rng.standard_normal((16, 8)).astype(ml_dtypes.bfloat16),
        "model.layers.0.self_attn.o_proj.weight": q2,
    }
    shard2 = {
        "model.layers.0.self_attn.o_proj.weight_scale_inv": s2,
        "lm_head.weight": rng.standard_normal((16, 8)).astype(ml_dtypes.bfloat16),
    }
    names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    save_file(shard1, os.path.join(d, names[0]), metadata={"format": "pt"})
    save_file(shard2, os.path.join(d, names[1]), metadata={"format": "pt"})
    weight_map = {k: names[0] for k in shard1}
    weight_map.update({k: names[1] for k in shard2})
    total = sum(v.nbytes for v in list(shard1.values()) + list(shard2.values()))
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as fh:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, fh, indent=2)
    exp2 = {k: v.astype(np.float32) for k, v in {**shard1, **shard2}.items()}
    exp2["model.layers.0.self_attn.o_proj.weight"] = dequant(q2, s2)
    save_file(exp2, os.path.join(out, "interop_sharded_expected.safetensors"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "format"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    fp8_table(a.out)
    half_hashes(a.out)
    bf16_rounding(a.out)
    interop(a.out)


if __name__ == "__main__":
    main()
