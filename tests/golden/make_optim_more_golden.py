#!/usr/bin/env python3
"""More golden trajectories for tests/test_optim.cpp, on make_optim_golden.py's problem (same seed,
same gradients, same two groups; problem.safetensors is not rewritten): SGDNesterov as kohya builds
it (torch.optim.SGD with nesterov=True and momentum=0.9 unless given) and dadaptation's DAdaptAdam and
DAdaptLion.

Writes tests/golden/data/optim/<case>.safetensors in make_optim_golden.py's format (traj.*, and d for
the D-Adaptation cases: the d estimate after each step).
Run with the golden venv (pip install dadaptation): ~/venv-golden/bin/python tests/golden/make_optim_more_golden.py
Deterministic (seeded, CPU).
"""
import sys
import pathlib

import torch
from dadaptation import DAdaptAdam, DAdaptLion

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from make_optim_golden import OUT, make_problem, run_case, save_file  # noqa: E402


def sgd_nesterov(**kw):
    kw.setdefault("momentum", 0.9)  # kohya's get_optimizer adds it
    return lambda gr: torch.optim.SGD(gr, nesterov=True, **kw)


# (name, optimizer_type, kohya args, factory, lr_unet, lr_te, scheduler, warmup, max_norm)
CASES = [
    ("sgd_nesterov", "SGDNesterov", ["weight_decay=0.01"], sgd_nesterov(weight_decay=0.01), 1e-2, 5e-3, "cosine", 5,
     1.0),
    ("sgd_nesterov_momentum", "SGDNesterov", ["momentum=0.5"], sgd_nesterov(momentum=0.5), 5e-2, 2e-2, "constant", 0,
     0.0),
    ("dadapt_adam", "DAdaptAdam", [], lambda gr: DAdaptAdam(gr), 1.0, 1.0, "constant", 0, 1.0),
    ("dadapt_adam_options", "DAdaptAdam",
     ["betas=0.9,0.99", "weight_decay=0.01", "decouple=True", "use_bias_correction=True", "growth_rate=1.05",
      "d0=1e-5"],
     lambda gr: DAdaptAdam(gr, betas=(0.9, 0.99), weight_decay=0.01, decouple=True, use_bias_correction=True,
                           growth_rate=1.05, d0=1e-5), 1.0, 1.0, "linear", 0, 1.0),
    ("dadapt_adam_coupled", "DAdaptAdam", ["weight_decay=0.1", "eps=1e-6"],
     lambda gr: DAdaptAdam(gr, weight_decay=0.1, eps=1e-6), 0.5, 0.5, "constant", 0, 0.0),
    ("dadapt_lion", "DAdaptLion", [], lambda gr: DAdaptLion(gr), 1.0, 1.0, "constant", 0, 1.0),
    ("dadapt_lion_options", "DAdaptLion", ["betas=0.95,0.98", "weight_decay=0.1", "d0=1e-5"],
     lambda gr: DAdaptLion(gr, betas=(0.95, 0.98), weight_decay=0.1, d0=1e-5), 0.5, 0.5, "linear", 0, 0.0),
]


def main():
    torch.manual_seed(0)
    prob = make_problem()
    for name, otype, args, factory, lr_unet, lr_te, scheduler, warmup, max_norm in CASES:
        tensors = run_case(prob, factory, lr_unet, lr_te, scheduler, warmup, max_norm)
        meta = {"optimizer_type": otype, "optimizer_args": ";".join(args), "lr_unet": repr(lr_unet),
                "lr_te": repr(lr_te), "lr_scheduler": scheduler, "warmup": str(warmup), "max_grad_norm": repr(max_norm)}
        save_file(tensors, str(OUT / (name + ".safetensors")), metadata=meta)
        print(name, {k: tuple(v.shape) for k, v in tensors.items()})


if __name__ == "__main__":
    main()
