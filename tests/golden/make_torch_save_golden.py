#!/usr/bin/env python3
"""torch.save's format for tests/test_torch_save.cpp (tests/golden/data/ckpt/).

Run with the golden venv:  ~/venv-golden/bin/python tests/golden/make_torch_save_golden.py
1. Writes torch_saved.pt: torch.save of the LoRA-shaped dict the C++ test builds (an OrderedDict
   as kohya's network.state_dict(): f32 lora_down, f16 lora_up, a 0-d bf16 alpha; values
   i * 0.25 - 2, exact in every dtype), the layout our writer is compared with.
2. Checks sdtrain_written.pt, the file our writer makes of that dict (the C++ test checks that its
   bytes are still these), with torch.load(weights_only=True) as A1111 and ComfyUI load LoRAs,
   and with mmap=True (which needs torch's 64-byte alignment of the data): the same keys in the
   same order, dtypes, shapes and values.
"""
import collections
import os
import sys

import torch

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "ckpt")


def ramp(dtype, shape):
    n = 1
    for d in shape:
        n *= d
    return (torch.arange(n, dtype=torch.float64) * 0.25 - 2.0).to(dtype).reshape(shape)


def lora_dict():
    return collections.OrderedDict(
        [
            ("lora_unet_mid.lora_down.weight", ramp(torch.float32, (2, 3))),
            ("lora_unet_mid.lora_up.weight", ramp(torch.float16, (3, 2, 1, 1))),
            ("lora_unet_mid.alpha", torch.tensor(4.0, dtype=torch.bfloat16)),
        ]
    )


def check(path, want):
    for mmap in (False, True):
        got = torch.load(path, weights_only=True, mmap=mmap)
        assert list(got.keys()) == list(want.keys()), (path, list(got.keys()))
        for k, v in want.items():
            g = got[k]
            assert g.dtype == v.dtype and g.shape == v.shape, (k, g.dtype, g.shape)
            assert torch.equal(g, v), (k, g, v)
    print(f"{os.path.basename(path)}: torch.load(weights_only=True) reads the dict (mmap too)")


def main():
    os.makedirs(OUT, exist_ok=True)
    want = lora_dict()
    torch.save(want, os.path.join(OUT, "torch_saved.pt"))
    ours = os.path.join(OUT, "sdtrain_written.pt")
    if not os.path.exists(ours):
        sys.exit(f"{ours} is missing: GL_KEEP_SCRATCH=1 ./build/gl-tests -tc='torch save: a LoRA dict*' "
                 "leaves it in /tmp/gl_torch_save_<pid>/")
    check(ours, want)


if __name__ == "__main__":
    main()
