#!/usr/bin/env python3
"""Golden data for tests/test_optim.cpp: optimizer trajectories from the Python implementations
kohya's sd-scripts uses.

Writes tests/golden/data/optim/:
  problem.safetensors   a small quadratic problem shared by every case: params w [4, 6] (2-D, factored
                        by Adafactor), conv (PyTorch [2, 3, 2, 2] = [Cout, Cin, kh, kw], a conv weight,
                        stored here in ggml-lite's layout [Cout, kh, kw, Cin]) and b [5] (1-D); per param
                        init.*, target.*, noise.* [STEPS, ...]. The gradient at step k (0-based) is
                        g = (p - target) * 0.5 + noise[k], computed in f32 from the current params.
  adam8bit_maps.safetensors  signed / unsigned [256]: bitsandbytes' dynamic quantisation maps for 8-bit
                        Adam (create_dynamic_map(signed, max_exponent_bits=7, total_bits=8)), rebuilt
                        here with torch ops in the same order (bitsandbytes needs CUDA to install).
  <case>.safetensors    traj.* [STEPS, ...]: the params after each step (ggml-lite layout); for Prodigy
                        also d [STEPS] (the d estimate after each step). Metadata: optimizer_type and
                        optimizer_args (kohya's spelling, args joined by ';'), lr_unet (w, conv) and
                        lr_te (b) base learning rates, lr_scheduler, warmup, max_grad_norm (0: none).
Two parameter groups with their own learning rates: "unet" = {w, conv}, "te" = {b}. Clipping is
torch.nn.utils.clip_grad_norm_ over all params before the step, as accelerate does in kohya's loop.
Optimizers: torch.optim.AdamW, transformers.optimization.Adafactor, lion_pytorch.Lion,
prodigyopt.Prodigy. Learning-rate schedules from diffusers.optimization.get_scheduler.

Run with the golden venv: /work/venv-golden/bin/python tests/golden/make_optim_golden.py
(needs torch, transformers, diffusers, safetensors, lion-pytorch, prodigyopt). Deterministic (seeded, CPU).
"""
import json
import pathlib

import torch
from diffusers.optimization import get_scheduler
from lion_pytorch import Lion
from prodigyopt import Prodigy
from transformers.optimization import Adafactor

OUT = pathlib.Path(__file__).resolve().parent / "data" / "optim"
STEPS = 60
SHAPES = {"w": (4, 6), "conv": (2, 3, 2, 2), "b": (5,)}


def save_file(tensors, path, metadata=None):
    """safetensors with sorted header keys (safetensors' own writer orders metadata by hash, so its
    files would differ from run to run)."""
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name in sorted(tensors):
        data = tensors[name].detach().to(torch.float32).contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + b"".join(blobs))


def to_ours(name, t):
    """PyTorch conv weights [Cout, Cin, kh, kw] -> ggml-lite's [Cout, kh, kw, Cin] (any leading step dim kept)."""
    if name != "conv":
        return t.contiguous()
    return t.movedim(-3, -1).contiguous()


def make_problem():
    gen = torch.Generator().manual_seed(20240517)
    prob = {}
    for name, shape in SHAPES.items():
        prob["init." + name] = torch.randn(shape, generator=gen) * 0.5
        prob["target." + name] = torch.randn(shape, generator=gen)
        prob["noise." + name] = torch.randn((STEPS,) + shape, generator=gen) * 0.2
    return prob


# (name, optimizer_type, kohya args, factory(groups) -> optimizer, lr_unet, lr_te, scheduler, warmup, max_norm)
CASES = [
    ("adamw", "AdamW", ["weight_decay=0.01", "betas=0.9,0.99"],
     lambda gr: torch.optim.AdamW(gr, weight_decay=0.01, betas=(0.9, 0.99)), 1e-2, 5e-3, "cosine", 5, 1.0),
    ("adafactor_fixed_lr", "Adafactor",
     ["relative_step=False", "scale_parameter=False", "warmup_init=False", "weight_decay=0.01"],
     lambda gr: Adafactor(gr, relative_step=False, scale_parameter=False, warmup_init=False, weight_decay=0.01),
     1e-2, 5e-3, "constant", 0, 0.0),
    ("adafactor_relative_step", "Adafactor", ["relative_step=True", "scale_parameter=True", "beta1=0.9"],
     lambda gr: Adafactor(gr, lr=None, relative_step=True, scale_parameter=True, beta1=0.9), 1.0, 1.0, "constant", 0,
     0.0),
    ("adafactor_warmup_init", "Adafactor", ["relative_step=True", "warmup_init=True", "weight_decay=0.1"],
     lambda gr: Adafactor(gr, lr=None, relative_step=True, warmup_init=True, weight_decay=0.1), 1.0, 1.0, "constant",
     0, 0.0),
    ("lion", "Lion", ["weight_decay=0.1", "betas=0.9,0.99"],
     lambda gr: Lion(gr, weight_decay=0.1, betas=(0.9, 0.99)), 1e-3, 5e-4, "constant", 0, 1.0),
    ("prodigy", "Prodigy", ["weight_decay=0.01"], lambda gr: Prodigy(gr, weight_decay=0.01), 1.0, 1.0, "constant", 0,
     1.0),
    ("prodigy_options", "Prodigy",
     ["betas=0.9,0.99", "beta3=0.98", "use_bias_correction=True", "safeguard_warmup=True", "d_coef=2",
      "growth_rate=1.05", "decouple=False", "weight_decay=0.01", "d0=1e-5"],
     lambda gr: Prodigy(gr, betas=(0.9, 0.99), beta3=0.98, use_bias_correction=True, safeguard_warmup=True, d_coef=2,
                        growth_rate=1.05, decouple=False, weight_decay=0.01, d0=1e-5), 1.0, 1.0, "constant", 0, 1.0),
    ("prodigy_no_first_moment", "Prodigy", ["betas=0,0.99", "weight_decay=0.01"],
     lambda gr: Prodigy(gr, betas=(0.0, 0.99), weight_decay=0.01), 1.0, 1.0, "linear", 0, 0.0),
]


def run_case(prob, factory, lr_unet, lr_te, scheduler, warmup, max_norm):
    params = {n: torch.nn.Parameter(prob["init." + n].clone()) for n in SHAPES}
    groups = [{"params": [params["w"], params["conv"]], "lr": lr_unet}, {"params": [params["b"]], "lr": lr_te}]
    opt = factory(groups)
    if any(g["lr"] is None for g in opt.param_groups):
        sched = None  # Adafactor's relative step: the optimizer owns its learning rate
    else:
        sched = get_scheduler(scheduler, opt, num_warmup_steps=warmup, num_training_steps=STEPS)
    traj = {n: [] for n in SHAPES}
    ds = []
    for k in range(STEPS):
        for n, p in params.items():
            p.grad = (p.detach() - prob["target." + n]) * 0.5 + prob["noise." + n][k]
        if max_norm > 0:
            torch.nn.utils.clip_grad_norm_(list(params.values()), max_norm)
        opt.step()
        if sched is not None:
            sched.step()
        for n, p in params.items():
            traj[n].append(p.detach().clone())
        if "d" in opt.param_groups[0]:
            ds.append(float(opt.param_groups[0]["d"]))
    out = {"traj." + n: to_ours(n, torch.stack(v)) for n, v in traj.items()}
    if ds:
        out["d"] = torch.tensor(ds, dtype=torch.float32)
    return out


def dynamic_map(signed, max_exponent_bits=7, total_bits=8):
    """bitsandbytes.functional.create_dynamic_map: for exponent i the midpoints of linspace(0.1, 1, F)
    scaled by 10^(i - max_exponent_bits + 1) (and negated when signed), then 0 and 1, sorted."""
    data = []
    non_sign_bits = total_bits - 1
    for i in range(max_exponent_bits):
        items = 2 ** (i + non_sign_bits - max_exponent_bits) + 1 if signed else 2 ** (i + non_sign_bits - max_exponent_bits + 1) + 1
        boundaries = torch.linspace(0.1, 1, items)
        means = (boundaries[:-1] + boundaries[1:]) / 2.0
        data += ((10 ** (-(max_exponent_bits - 1) + i)) * means).tolist()
        if signed:
            data += (-(10 ** (-(max_exponent_bits - 1) + i)) * means).tolist()
    data.append(0)
    data.append(1.0)
    assert len(data) == 2 ** total_bits
    data.sort()
    return torch.tensor(data)


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    prob = make_problem()
    save_file({k: to_ours(k.split(".")[1], v) for k, v in prob.items()}, str(OUT / "problem.safetensors"),
              metadata={"steps": str(STEPS), "groups": "unet=w,conv;te=b"})
    save_file({"signed": dynamic_map(True), "unsigned": dynamic_map(False)}, str(OUT / "adam8bit_maps.safetensors"))
    for name, otype, args, factory, lr_unet, lr_te, scheduler, warmup, max_norm in CASES:
        tensors = run_case(prob, factory, lr_unet, lr_te, scheduler, warmup, max_norm)
        meta = {"optimizer_type": otype, "optimizer_args": ";".join(args), "lr_unet": repr(lr_unet),
                "lr_te": repr(lr_te), "lr_scheduler": scheduler, "warmup": str(warmup), "max_grad_norm": repr(max_norm)}
        save_file(tensors, str(OUT / (name + ".safetensors")), metadata=meta)
        print(name, {k: tuple(v.shape) for k, v in tensors.items()})


if __name__ == "__main__":
    main()
