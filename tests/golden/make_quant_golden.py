#!/usr/bin/env python3
"""PyTorch's float8_e4m3fn conversions for tests/test_quant.cpp (tests/golden/data/quant/).

Run with the golden venv:  /work/venv-golden/bin/python tests/golden/make_quant_golden.py
decode: the f32 value of each of the 256 codes; encode_in / encode_out: f32 values and the code
torch's cast gives each (every code, every midpoint between neighbouring codes and one f32 ulp on
either side of it, the overflow edge, infinities, and random values over the whole range).
"""
import os

import numpy as np
import torch
from safetensors.numpy import save_file

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "quant")


def main():
    os.makedirs(OUT, exist_ok=True)
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    decode = codes.view(torch.float8_e4m3fn).to(torch.float32)

    vals = decode[torch.isfinite(decode)].double().unique().sort().values
    mids = ((vals[1:] + vals[:-1]) / 2).float()  # exact in f32: neighbours differ in few bits
    f = np.float32
    near = [np.nextafter(mids.numpy(), f(np.inf)), np.nextafter(mids.numpy(), f(-np.inf))]
    edges = np.array([448, 464, np.nextafter(f(464), f(0)), np.nextafter(f(464), f(1e9)), 479.99, 480, 481, 1e30,
                      np.inf, 2.0 ** -10, np.nextafter(f(2.0 ** -10), f(1)), 2.0 ** -11, 1e-30, 0.0], dtype=f)
    rng = np.random.default_rng(5)
    rand = (rng.standard_normal(4000) * np.exp2(rng.uniform(-12, 9, 4000))).astype(f)
    pos = np.concatenate([decode[torch.isfinite(decode)].numpy(), mids.numpy(), near[0], near[1], edges, rand])
    enc_in = np.concatenate([pos, -pos, np.array([np.nan], dtype=f)]).astype(f)
    enc_out = torch.from_numpy(enc_in).to(torch.float8_e4m3fn).view(torch.uint8).numpy()
    save_file({"decode": decode.numpy(), "encode_in": enc_in, "encode_out": enc_out},
              os.path.join(OUT, "fp8_e4m3.safetensors"))
    print("fp8_e4m3.safetensors:", len(enc_in), "encodings")


if __name__ == "__main__":
    main()
