#!/usr/bin/env python3
"""Tiny torch.save checkpoints for tests/test_torch_ckpt.cpp (written to tests/golden/data/ckpt/).

Run with the golden venv:  /work/venv-golden/bin/python tests/golden/make_ckpt.py
Values are small integers times powers of two, exact in every float dtype, so the C++ test
states the expected numbers as formulas; `rounding` holds random f32 values together with
torch's own f16/bf16 roundings of them, to check that we round exactly as torch does.
"""
import collections
import os

import numpy as np
import torch

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "ckpt")


def ramp(n, dtype, shape, scale=0.25, bias=-2.0):
    """(i * scale + bias) for i in 0..n-1, exact in f16/bf16 for the sizes used here."""
    return (torch.arange(n, dtype=torch.float64) * scale + bias).to(dtype).reshape(shape)


def save(obj, name):
    path = os.path.join(OUT, name)
    torch.save(obj, path)
    print(f"{name}: {os.path.getsize(path)} bytes")


def main():
    os.makedirs(OUT, exist_ok=True)

    # Every dtype a state dict may hold, plus a 0-d and an empty tensor.
    save(
        {
            "f32": ramp(6, torch.float32, (2, 3)),
            "f16": ramp(4, torch.float16, (4,)),
            "bf16": ramp(4, torch.bfloat16, (2, 2)),
            "f64": ramp(3, torch.float64, (3,)),
            "i64": torch.tensor([[-3, 0, 7, 2**31 - 1, -(2**31)]], dtype=torch.int64),
            "i32": torch.tensor([-5, 6], dtype=torch.int32),
            "u8": torch.tensor([0, 255, 7], dtype=torch.uint8),
            "i8": torch.tensor([-128, 127, -1], dtype=torch.int8),
            "bool": torch.tensor([True, False, True]),
            "scalar": torch.tensor(1.5),
            "empty": torch.zeros(0, 3),
            "five_d": ramp(32, torch.float32, (1, 2, 2, 2, 4)),
        },
        "dtypes.ckpt",
    )

    # The original SD layout: weights under "state_dict", next to training state that holds a
    # numpy scalar (an inert GLOBAL) and plain numbers.
    inner = collections.OrderedDict()
    inner["model.diffusion_model.w"] = ramp(4, torch.float16, (2, 2))
    inner["first_stage_model.b"] = ramp(2, torch.float32, (2,), 1.0, 0.0)
    save(
        {"epoch": 3, "global_step": np.int64(1000), "state_dict": inner, "lr": 1e-4, "name": "tiny"},
        "nested.ckpt",
    )

    # Views: strided, transposed, offset, broadcast (stride 0), all sharing one storage, and a
    # parameter (pickled through _rebuild_parameter).
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    save(
        {
            "base": base,
            "strided": base[:, 1:5:2],  # [4, 2], stride (6, 2), offset 1
            "transposed": base.t(),  # [6, 4], stride (1, 6)
            "row2": base[2],  # [6], offset 12
            "tail": base.view(-1)[20:],  # [4], offset 20
            "expanded": torch.arange(3, dtype=torch.bfloat16).reshape(3, 1).expand(3, 4),  # stride (1, 0)
            "param": torch.nn.Parameter(ramp(4, torch.float32, (2, 2))),
        },
        "views.ckpt",
    )

    # A real module's state dict: an OrderedDict with a _metadata attribute (pickled via BUILD).
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3), torch.nn.GroupNorm(1, 3), torch.nn.Linear(4, 5))
    sd = net.state_dict()
    save(sd, "module.ckpt")
    # Its values as text, so the C++ test compares without any other reader.
    with open(os.path.join(OUT, "module_values.txt"), "w") as f:
        for k, v in sd.items():
            f.write(k + " " + " ".join(str(d) for d in v.shape) + " :")
            f.write("".join(" %.9g" % x for x in v.flatten().tolist()) + "\n")

    # Rounding: torch's f32 -> f16 / bf16 conversions of random values (incl. tiny and huge ones).
    g = torch.Generator().manual_seed(1)
    r = torch.randn(256, generator=g) * torch.logspace(-8, 6, 256)
    r[:4] = torch.tensor([65519.0, 65520.0, 1e-8, -3.4e38])
    save({"r32": r, "r16": r.half(), "rbf": r.bfloat16()}, "rounding.ckpt")


if __name__ == "__main__":
    main()
