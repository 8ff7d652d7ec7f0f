#!/usr/bin/env python3
"""Golden trajectories for tests/test_optim.cpp of bitsandbytes' AdEMAMix8bit on make_optim_golden.py's
problem (tests/golden/data/optim/problem.safetensors, not rewritten), in make_optim_standalone_golden.py's
format and loop (two groups, clipping, 60 steps).

bitsandbytes' optimizer kernels need a CUDA GPU (its CPU backend is a different port: decay before the
step, no sign-keeping requantisation), so its class cannot run here. Every tensor of this problem is
under min_8bit_size (4096), where AdEMAMix8bit keeps 32-bit state and runs the 32-bit ADEMAMIX kernel
(csrc/kernels.cu, kOptimizer32bit2State): this script is that kernel's arithmetic written out in f32
torch ops, in its order, with the alpha / beta3 warm-ups as bitsandbytes' AdEMAMix.update_step
computes them in Python (doubles, handed to the kernel as floats):
  m1 = m1 b1 + (1 - b1) g;  m2 = m2 b3 + (1 - b3) g;  nu = nu b2 + (1 - b2) g g
  p = p - lr ((m1 / c1 + alpha m2) / (sqrt(nu) / c2 + eps)),  c1 = 1 - b1^t, c2 = sqrt(1 - b2^t)
  p = p (1 - lr wd)  when wd > 0
The 8-bit path is checked against this fp32 step within the quantisation error
(tests/test_optim_ademamix8bit.cpp) and exactly by the op cases (tests/cases_ademamix.cpp).

  <golden python> tests/golden/make_optim_bnb_golden.py
Needs only torch. Deterministic (CPU).
"""
import math
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from make_optim_standalone_golden import NAMES, OUT, STEPS, linear_with_warmup, load, save  # noqa: E402

F32 = torch.float32


def f32(x):
    return torch.tensor(x, dtype=F32)


class AdEMAMix32bitKernel:
    """bitsandbytes' 32-bit ADEMAMIX step per param (its state["step"] counts from 1)."""

    def __init__(self, groups, betas=(0.9, 0.999, 0.9999), alpha=5.0, t_alpha=None, t_beta3=None, eps=1e-8,
                 weight_decay=1e-2):
        self.groups = groups
        self.betas, self.alpha, self.t_alpha, self.t_beta3 = betas, alpha, t_alpha, t_beta3
        self.eps, self.wd = eps, weight_decay
        self.state = {}
        for g in groups:
            g["initial_lr"] = g["lr"]

    def step(self):
        beta1, beta2, beta3 = self.betas
        for group in self.groups:
            for p in group["params"]:
                st = self.state.setdefault(p, {"step": 0, "m1": torch.zeros_like(p), "m2": torch.zeros_like(p),
                                               "nu": torch.zeros_like(p)})
                st["step"] += 1
                step = st["step"]
                alpha_t = min(step * self.alpha / self.t_alpha, self.alpha) if self.t_alpha else self.alpha
                beta3_t = beta3
                if self.t_beta3:
                    ln1, ln3 = math.log(beta1), math.log(beta3)
                    s = step / self.t_beta3
                    beta3_t = min(math.exp((ln1 * ln3) / (((1 - s) * ln3) + (s * ln1))), beta3)
                b1, b2, b3, a, lr, eps, wd = (f32(v) for v in (beta1, beta2, beta3_t, alpha_t, group["lr"],
                                                               self.eps, self.wd))
                one = f32(1.0)
                g = p.grad.detach()
                m1, m2, nu = st["m1"], st["m2"], st["nu"]
                m1.copy_(m1 * b1 + (one - b1) * g)
                m2.copy_(m2 * b3 + (one - b3) * g)
                nu.copy_(nu * b2 + ((one - b2) * g) * g)
                c1 = one - torch.pow(b1, f32(step))
                c2 = torch.sqrt(one - torch.pow(b2, f32(step)))
                with torch.no_grad():
                    p.copy_(p - lr * ((m1 / c1 + a * m2) / (torch.sqrt(nu) / c2 + eps)))
                    if self.wd > 0:
                        p.copy_(p * (one - lr * wd))


def run(prob, factory, lr_unet, lr_te, scheduler, warmup, max_norm):
    params = {n: torch.nn.Parameter(prob["init." + n].clone()) for n in NAMES}
    groups = [{"params": [params["w"], params["conv"]], "lr": lr_unet}, {"params": [params["b"]], "lr": lr_te}]
    opt = factory(groups)
    mult = linear_with_warmup(warmup) if scheduler == "linear" else (lambda s: 1.0)
    assert scheduler in ("linear", "constant")
    traj = {n: [] for n in NAMES}
    for k in range(STEPS):
        for g in groups:  # LambdaLR: the step's lr from the initial one
            g["lr"] = g["initial_lr"] * mult(k)
        for n, p in params.items():
            p.grad = (p.detach() - prob["target." + n]) * 0.5 + prob["noise." + n][k]
        if max_norm > 0:
            torch.nn.utils.clip_grad_norm_(list(params.values()), max_norm)
        opt.step()
        for n, p in params.items():
            traj[n].append(p.detach().clone())
    return {"traj." + n: torch.stack(v) for n, v in traj.items()}


# (name, optimizer_type, kohya args, factory, lr_unet, lr_te, scheduler, warmup, max_norm)
CASES = [
    ("ademamix8bit", "bitsandbytes.optim.AdEMAMix8bit", [], lambda gr: AdEMAMix32bitKernel(gr), 1e-2, 5e-3,
     "constant", 0, 1.0),
    ("ademamix8bit_warmup", "AdEMAMix8bit",
     ["betas=(0.9, 0.99, 0.999)", "alpha=8", "t_alpha=30", "t_beta3=40", "weight_decay=0", "eps=1e-6"],
     lambda gr: AdEMAMix32bitKernel(gr, betas=(0.9, 0.99, 0.999), alpha=8.0, t_alpha=30, t_beta3=40,
                                    weight_decay=0.0, eps=1e-6), 2e-2, 1e-2, "linear", 5, 0.0),
]


def main():
    prob = load(OUT / "problem.safetensors")
    for name, otype, args, factory, lr_unet, lr_te, scheduler, warmup, max_norm in CASES:
        tensors = run(prob, factory, lr_unet, lr_te, scheduler, warmup, max_norm)
        meta = {"optimizer_type": otype, "optimizer_args": ";".join(args), "lr_unet": repr(lr_unet),
                "lr_te": repr(lr_te), "lr_scheduler": scheduler, "warmup": str(warmup), "max_grad_norm": repr(max_norm)}
        save(tensors, str(OUT / (name + ".safetensors")), meta)
        print(name, "moved", max((tensors["traj." + n][-1] - prob["init." + n]).abs().max().item() for n in NAMES))


if __name__ == "__main__":
    main()
