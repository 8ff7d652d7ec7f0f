#!/usr/bin/env python3
"""safetensors compatibility both ways, for tests/test_safetensors.cpp (tests/golden/data/safetensors/).

Run with the golden venv:  /work/venv-golden/bin/python tests/golden/make_safetensors.py
1. Writes py_written.safetensors with the reference `safetensors` package; the C++ test reads it.
2. Reads cpp_written.safetensors (written by our writer; the C++ test checks that the writer
   still produces exactly these bytes, and rewrites the file when GL_REGEN_GOLDEN=1) with the
   reference package and checks every tensor and the metadata. Exits non-zero on a mismatch.
Values are (i * 0.25 - 2) ramps, exact in every float dtype, so both sides state them as formulas.
"""
import os
import sys

import torch
from safetensors import safe_open
from safetensors.torch import save_file

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "safetensors")
META = {"format": "pt", "ss_note": "\u00fcn\u00efcode \u2713"}


def ramp(n, dtype, shape):
    return (torch.arange(n, dtype=torch.float64) * 0.25 - 2.0).to(dtype).reshape(shape)


def common():
    """The tensors both writers store (the C++ test builds the same set)."""
    return {
        "w.f32": ramp(6, torch.float32, (2, 3)),
        "w.f16": ramp(3, torch.float16, (3,)),
        "w.bf16": ramp(4, torch.bfloat16, (2, 2)),
        "ids": torch.tensor([-1, 0, 1, 2**31 - 1], dtype=torch.int32),
        "bytes": torch.tensor([0, 128, 255], dtype=torch.uint8),
        "signed": torch.tensor([-128, 127], dtype=torch.int8),
        "scalar": torch.tensor(0.5),
        "empty": torch.zeros(0, 4),
    }


def main():
    os.makedirs(OUT, exist_ok=True)
    t = common()
    t["f64"] = ramp(3, torch.float64, (3,))
    t["i64"] = torch.tensor([5, -6], dtype=torch.int64)
    t["bool"] = torch.tensor([True, False])
    path = os.path.join(OUT, "py_written.safetensors")
    save_file(t, path, metadata=META)
    print(f"py_written.safetensors: {os.path.getsize(path)} bytes")

    ours = os.path.join(OUT, "cpp_written.safetensors")
    if not os.path.exists(ours):
        print("cpp_written.safetensors missing: run `GL_REGEN_GOLDEN=1 gl-tests -tc='*safetensors*'` first")
        return 1
    want = common()
    with safe_open(ours, framework="pt") as f:
        bad = []
        if f.metadata() != META:
            bad.append(f"metadata {f.metadata()!r}")
        if sorted(f.keys()) != sorted(want):
            bad.append(f"keys {sorted(f.keys())}")
        for k in f.keys():
            got = f.get_tensor(k)
            w = want.get(k)
            if w is None or got.dtype != w.dtype or got.shape != w.shape or not torch.equal(got, w):
                bad.append(f"tensor {k}: {got!r}")
    if bad:
        print("cpp_written.safetensors does not read back in the reference package:\n  " + "\n  ".join(bad))
        return 1
    print("cpp_written.safetensors: the reference package reads every tensor and the metadata back exactly")
    return 0


if __name__ == "__main__":
    sys.exit(main())
