#!/usr/bin/env python3
"""Golden trajectories of the schedule-free optimizers for tests/test_optim.cpp, on make_optim_golden.py's
problem (same seed, gradients and two groups; problem.safetensors is not rewritten): schedulefree's
AdamWScheduleFree and SGDScheduleFree as kohya's get_optimizer builds them (lr given, .train() before
the first step, a constant schedule: kohya's dummy scheduler).

Writes tests/golden/data/optim/<case>.safetensors in make_optim_golden.py's format: traj.* are the
params after each step in train mode (y, what the step graph holds), eval.* the weights optimizer.eval()
would set them to at that point (x = lerp(y, z, 1 - 1/beta1): what kohya saves and samples), computed
out of place so the train-mode trajectory is not rounded by eval/train round trips.
Run with the golden venv (pip install schedulefree):
    ~/venv-golden/bin/python tests/golden/make_optim_schedulefree_golden.py
Deterministic (seeded, CPU).
"""
import sys
import pathlib

import torch
import schedulefree

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from make_optim_golden import OUT, SHAPES, STEPS, make_problem, save_file, to_ours  # noqa: E402

# (name, optimizer_type, kohya args, factory, lr_unet, lr_te, max_norm)
CASES = [
    ("adamw_schedulefree", "AdamWScheduleFree", ["weight_decay=0.01", "warmup_steps=10"],
     lambda gr: schedulefree.AdamWScheduleFree(gr, weight_decay=0.01, warmup_steps=10), 1e-2, 5e-3, 1.0),
    ("adamw_schedulefree_options", "AdamWScheduleFree",
     ["betas=(0.95, 0.99)", "eps=1e-6", "r=0.5", "weight_lr_power=1.0"],
     lambda gr: schedulefree.AdamWScheduleFree(gr, betas=(0.95, 0.99), eps=1e-6, r=0.5, weight_lr_power=1.0),
     2e-2, 0.0, 0.0),
    ("sgd_schedulefree", "SGDScheduleFree", ["weight_decay=0.01", "warmup_steps=5"],
     lambda gr: schedulefree.SGDScheduleFree(gr, weight_decay=0.01, warmup_steps=5), 0.5, 0.2, 1.0),
    ("sgd_schedulefree_options", "SGDScheduleFree", ["momentum=0.8", "r=1.0", "weight_lr_power=0"],
     lambda gr: schedulefree.SGDScheduleFree(gr, momentum=0.8, r=1.0, weight_lr_power=0), 0.3, 0.1, 0.0),
]


def momentum_of(group):
    return group["betas"][0] if "betas" in group else group["momentum"]


def run_case(prob, factory, lr_unet, lr_te, max_norm):
    params = {n: torch.nn.Parameter(prob["init." + n].clone()) for n in SHAPES}
    groups = [{"params": [params["w"], params["conv"]], "lr": lr_unet}, {"params": [params["b"]], "lr": lr_te}]
    opt = factory(groups)
    opt.train()
    group_of = {id(p): g for g in opt.param_groups for p in g["params"]}
    traj = {n: [] for n in SHAPES}
    ev = {n: [] for n in SHAPES}
    for k in range(STEPS):
        for n, p in params.items():
            p.grad = (p.detach() - prob["target." + n]) * 0.5 + prob["noise." + n][k]
        if max_norm > 0:
            torch.nn.utils.clip_grad_norm_(list(params.values()), max_norm)
        opt.step()
        for n, p in params.items():
            traj[n].append(p.detach().clone())
            z = opt.state[p]["z"]
            ev[n].append(torch.lerp(p.detach(), z, 1 - 1 / momentum_of(group_of[id(p)])))
    out = {"traj." + n: to_ours(n, torch.stack(v)) for n, v in traj.items()}
    out.update({"eval." + n: to_ours(n, torch.stack(v)) for n, v in ev.items()})
    return out


def main():
    torch.manual_seed(0)
    prob = make_problem()
    for name, otype, args, factory, lr_unet, lr_te, max_norm in CASES:
        tensors = run_case(prob, factory, lr_unet, lr_te, max_norm)
        meta = {"optimizer_type": otype, "optimizer_args": ";".join(args), "lr_unet": repr(lr_unet),
                "lr_te": repr(lr_te), "lr_scheduler": "constant", "warmup": "0", "max_grad_norm": repr(max_norm)}
        save_file(tensors, str(OUT / (name + ".safetensors")), metadata=meta)
        print(name, {k: tuple(v.shape) for k, v in tensors.items()})


if __name__ == "__main__":
    main()
