#!/usr/bin/env python3
"""NumPy reference for the moestream stored weight formats.

common/format/qformat.h is the spec; this file restates it with NumPy only
(float32 arithmetic everywhere) so that the C++ quantizers in
common/format/quantize.cc can be compared byte for byte.

  quant_ref.py gen OUTDIR   writes the committed test vectors
                            (OUTDIR/quant_cases.json + quant_cases.bin)
  quant_ref.py stats        prints round-trip error per format (docs/FORMATS.md)
"""
import json
import os
import sys

import numpy as np

# name -> (bits, group (0 = per row, -1 = none), qmax); mirrors kQFormatTable.
FORMATS = {
    "f32": (32, -1, 0),
    "bf16": (16, -1, 0),
    "q8_row": (8, 0, 127),
    "q4_row": (4, 0, 7),
    "q2_row": (2, 0, 1),
    "q8_g32": (8, 32, 127),
    "q8_g64": (8, 64, 127),
    "q8_g128": (8, 128, 127),
    "q4_g32": (4, 32, 7),
    "q4_g64": (4, 64, 7),
    "q4_g128": (4, 128, 7),
}


def row_bytes(fmt, cols):
    return (cols * FORMATS[fmt][0] + 7) // 8


def f32_to_bf16_bits(w):
    u = np.ascontiguousarray(w, dtype=np.float32).view(np.uint32).astype(np.uint64)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    quiet = (u >> 16) | 0x40
    return np.where(nan, quiet, rounded).astype(np.uint16)


def quantize(fmt, w):
    """w: float32 [rows, cols]. Returns (data uint8 [rows, row_bytes], scales float32 [rows, groups])."""
    w = np.ascontiguousarray(w, dtype=np.float32)
    rows, cols = w.shape
    bits, group, qmax = FORMATS[fmt]
    if fmt == "f32":
        return w.view(np.uint8).reshape(rows, cols * 4).copy(), np.zeros((rows, 0), np.float32)
    if fmt == "bf16":
        return f32_to_bf16_bits(w).view(np.uint8).reshape(rows, cols * 2).copy(), np.zeros((rows, 0), np.float32)
    if not np.all(np.isfinite(w)):
        raise ValueError("non-finite value cannot be quantized to " + fmt)
    g = cols if group == 0 else group
    ng = (cols + g - 1) // g
    wp = np.zeros((rows, ng * g), np.float32)
    wp[:, :cols] = w
    w3 = wp.reshape(rows, ng, g)
    absmax = np.abs(w3).max(axis=2)
    scale = np.maximum(absmax / np.float32(qmax), np.float32(1e-8)).astype(np.float32)
    q = np.rint(w3 / scale[:, :, None])
    q = np.clip(q, -qmax - 1, qmax).astype(np.int32).reshape(rows, ng * g)[:, :cols]
    if bits == 8:
        data = q.astype(np.int8).view(np.uint8)
    elif bits == 4:
        pad = (-cols) % 2
        c = np.concatenate([q, np.zeros((rows, pad), np.int32)], axis=1) + 8
        data = (c[:, 0::2] | (c[:, 1::2] << 4)).astype(np.uint8)
    else:
        pad = (-cols) % 4
        c = np.concatenate([q, np.zeros((rows, pad), np.int32)], axis=1) + 2
        data = (c[:, 0::4] | (c[:, 1::4] << 2) | (c[:, 2::4] << 4) | (c[:, 3::4] << 6)).astype(np.uint8)
    return np.ascontiguousarray(data), scale


def dequantize(fmt, data, scales, cols):
    rows = data.shape[0]
    bits, group, qmax = FORMATS[fmt]
    if fmt == "f32":
        return data.view(np.float32).reshape(rows, cols)
    if fmt == "bf16":
        return (data.view(np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(rows, cols)
    if bits == 8:
        q = data.view(np.int8).astype(np.int32)
    elif bits == 4:
        q = np.stack([data & 0xF, data >> 4], axis=2).reshape(rows, -1)[:, :cols].astype(np.int32) - 8
    else:
        q = np.stack([(data >> s) & 3 for s in (0, 2, 4, 6)], axis=2).reshape(rows, -1)[:, :cols].astype(np.int32) - 2
    g = cols if group == 0 else group
    s = np.repeat(scales, g, axis=1)[:, :cols]
    return q.astype(np.float32) * s


def tie_rows(cols, qmax, k, rng):
    """Rows whose every group of 32 holds +-qmax*2^-k, so every grouping has
    scale 2^-k exactly and (m + 0.5) * 2^-k are exact ties."""
    step = np.float32(2.0 ** -k)
    m = rng.integers(-qmax, qmax, size=cols).astype(np.float32)
    w = (m + np.float32(0.5)) * step
    w[0::32] = np.where(rng.random(len(w[0::32])) < 0.5, -qmax, qmax) * step
    return w.astype(np.float32)


def make_cases():
    rng = np.random.default_rng(20261129)
    cases = []
    cases.append(("normal_16x256", (rng.standard_normal((16, 256)) * 0.02).astype(np.float32)))
    cases.append(("heavy_8x384", (rng.standard_t(2.0, (8, 384)) * 0.01).astype(np.float32)))
    cases.append(("uniform_3x1000", rng.uniform(-3, 3, (3, 1000)).astype(np.float32)))
    for shape in [(7, 33), (5, 7), (3, 129), (4, 1), (2, 5), (3, 65), (2, 3)]:
        cases.append((f"odd_{shape[0]}x{shape[1]}", rng.standard_normal(shape).astype(np.float32)))
    z = rng.standard_normal((6, 96)).astype(np.float32)
    z[0] = 0
    z[3] = 0
    z[4] = 0
    z[4, 50] = -1.25              # one nonzero, negative: code -qmax
    z[5] = rng.standard_normal(96).astype(np.float32) * np.float32(1e-9)  # scale floor 1e-8
    cases.append(("zeros_6x96", z))
    ties = [tie_rows(160, q, k, rng) for q in (127, 7, 1) for k in (0, 3, 7)]
    cases.append(("ties_9x160", np.stack(ties)))
    neg = rng.standard_normal((4, 64)).astype(np.float32)
    neg[:, 10] = -np.abs(neg).max(axis=1) * 2  # absmax from a negative value: -qmax exactly
    cases.append(("negmax_4x64", neg))
    sp = np.array([[np.inf, -np.inf, np.nan, -np.nan, 1e-40, -1e-45, 3.4e38, -0.0,
                    np.float32(1.00390625), np.float32(1.01171875), 65504, -2.5]], np.float32)
    # Values halfway between two bf16 numbers (low 16 bits = 0x8000), both parities.
    halfway = (np.array([0x3F808000, 0x3F818000, 0xBF808000, 0xBF818000], np.uint32)).view(np.float32)
    sp = np.concatenate([sp, halfway[None, :].repeat(1, 0).reshape(1, 4).repeat(1, 1)], axis=1)
    cases.append(("specials_1x16", sp.astype(np.float32)))
    return cases


def gen(outdir):
    os.makedirs(outdir, exist_ok=True)
    blob = bytearray()
    index = []

    def put(b):
        off = len(blob)
        blob.extend(b)
        blob.extend(b"\0" * ((-len(blob)) % 16))
        return off

    for name, w in make_cases():
        rows, cols = w.shape
        entry = {"name": name, "rows": rows, "cols": cols,
                 "input_offset": put(w.astype("<f4").tobytes()), "outputs": {}}
        for fmt in FORMATS:
            try:
                data, scales = quantize(fmt, w)
            except ValueError:
                entry["outputs"][fmt] = {"error": True}
                continue
            assert data.shape == (rows, row_bytes(fmt, cols)), (fmt, data.shape)
            entry["outputs"][fmt] = {
                "data_offset": put(data.tobytes()), "data_bytes": data.size,
                "scales_offset": put(scales.astype("<f4").tobytes()), "scales_bytes": scales.size * 4,
            }
            back = dequantize(fmt, data, scales, cols)
            if fmt not in ("f32", "bf16"):
                assert np.all(np.abs(back - w) <= np.repeat(scales, cols if FORMATS[fmt][1] == 0 else FORMATS[fmt][1], axis=1)[:, :cols] * 0.5000001 + 1e-30)
        index.append(entry)
    with open(os.path.join(outdir, "quant_cases.bin"), "wb") as f:
        f.write(blob)
    with open(os.path.join(outdir, "quant_cases.json"), "w") as f:
        json.dump({"generator": "tools/format/quant_ref.py gen", "cases": index}, f, indent=1)
        f.write("\n")
    # Independent check of the bf16 rounding against ml_dtypes when available.
    try:
        import ml_dtypes
        for _, w in make_cases():
            ours = f32_to_bf16_bits(w)
            theirs = w.astype(ml_dtypes.bfloat16).view(np.uint16)
            finite = np.isfinite(w)
            assert np.array_equal(ours[finite], theirs[finite]), "bf16 rounding differs from ml_dtypes"
    except ImportError:
        pass
    print(f"wrote {len(index)} cases, {len(blob)} bytes to {outdir}")


def stats():
    rng = np.random.default_rng(7)
    w = (rng.standard_normal((512, 4096)) * 0.02).astype(np.float32)
    heavy = (rng.standard_t(4.0, (512, 4096)) * 0.02).astype(np.float32)
    print("| format | bits/weight (incl. scales) | NRMSE normal | max err/absmax normal | NRMSE t(4) | max err/absmax t(4) |")
    print("|---|---|---|---|---|---|")
    for fmt, (bits, group, qmax) in FORMATS.items():
        row = [fmt]
        g = 4096 if group <= 0 else group
        bpw = bits + (32.0 / g if group >= 0 else 0)
        row.append(f"{bpw:.3f}")
        for m in (w, heavy):
            data, scales = quantize(fmt, m)
            back = dequantize(fmt, data, scales, m.shape[1])
            err = back - m
            nrmse = np.sqrt(np.mean(err.astype(np.float64) ** 2) / np.mean(m.astype(np.float64) ** 2))
            m3 = np.abs(m).reshape(m.shape[0], -1, g).max(axis=2)
            rel = np.abs(err).reshape(m.shape[0], -1, g).max(axis=2) / m3
            row += [f"{nrmse:.2e}", f"{rel.max():.4f}"]
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "gen":
        gen(sys.argv[2])
    elif len(sys.argv) == 2 and sys.argv[1] == "stats":
        stats()
    else:
        print(__doc__)
        sys.exit(2)
