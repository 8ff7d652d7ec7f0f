#!/usr/bin/env python3
"""Golden data for tests/test_schedule_kohya.cpp: learning rates of the schedules kohya's
get_scheduler_fix (sd-scripts library/train_util.py at 48d368f) builds from its options.

Writes tests/golden/data/schedule/kohya.json: one case per set of kohya options (lr_scheduler,
lr_scheduler_type, lr_scheduler_args, lr_warmup_steps, lr_decay_steps, lr_scheduler_num_cycles,
lr_scheduler_power, lr_scheduler_timescale, lr_scheduler_min_lr_ratio; max_train_steps = TOTAL, one
process) with lr[k], the lr of the optimizer's step k (0-based, get_last_lr() before the k-th
scheduler.step()) for a group whose lr is the optimizer's default lr BASE_LR, STEPS steps (past TOTAL
where the schedule allows it: OneCycleLR stops at its total_steps).

Nothing is re-derived here: kohya's get_scheduler_fix itself is read from its source and run, with
the schedules of the versions kohya pins (transformers 4.54.1's optimization.py, diffusers 0.32.1's
piecewise constant, torch's own lr_scheduler classes). transformers 4.54.1's package refuses to import
next to the golden venv's newer tokenizers, so its optimization.py is loaded from source as well:
    pip install --no-deps --target /tmp/tf4541 transformers==4.54.1
    TRANSFORMERS_4541=/tmp/tf4541 ~/venv-golden/bin/python tests/golden/make_kohya_schedule_golden.py
Deterministic (no randomness).
"""
import argparse
import ast
import enum
import importlib
import json
import logging
import math
import os
import pathlib
import types
import warnings
from functools import partial
from typing import Optional, Union

import torch
from diffusers.optimization import SchedulerType as DiffusersSchedulerType
from diffusers.optimization import TYPE_TO_SCHEDULER_FUNCTION as DIFFUSERS_TYPE_TO_SCHEDULER_FUNCTION
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR

OUT = pathlib.Path(__file__).resolve().parent / "data" / "schedule" / "kohya.json"
KOHYA = pathlib.Path("/work/ref/sd-scripts/library/train_util.py")
BASE_LR = 1e-3
TOTAL = 120
STEPS = TOTAL + 15


def load_functions(path, names, namespace):
    """Executes the top-level definitions `names` of a Python file in `namespace`, in file order."""
    tree = ast.parse(pathlib.Path(path).read_text())
    body = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name in names]
    exec(compile(ast.Module(body=body, type_ignores=[]), str(path), "exec"), namespace)
    return namespace


def transformers_schedules():
    root = pathlib.Path(os.environ.get("TRANSFORMERS_4541", "/tmp/tf4541")) / "transformers"
    class ExplicitEnum(str, enum.Enum):
        pass

    enum_ns = {"ExplicitEnum": ExplicitEnum}
    load_functions(root / "trainer_utils.py", {"SchedulerType"}, enum_ns)
    ns = {"math": math, "warnings": warnings, "partial": partial, "Optional": Optional, "Union": Union,
          "Optimizer": Optimizer, "LambdaLR": LambdaLR, "SchedulerType": enum_ns["SchedulerType"],
          "get_reduce_on_plateau_schedule": None}
    tree = ast.parse((root / "optimization.py").read_text())
    body = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name != "get_scheduler"
            or isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "TYPE_TO_SCHEDULER_FUNCTION" for t in n.targets)]
    exec(compile(ast.Module(body=body, type_ignores=[]), str(root / "optimization.py"), "exec"), ns)
    return enum_ns["SchedulerType"], ns["TYPE_TO_SCHEDULER_FUNCTION"]


def kohya_get_scheduler_fix():
    scheduler_type, type_to_function = transformers_schedules()
    ns = {"ast": ast, "argparse": argparse, "Any": object, "torch": torch, "importlib": importlib, "Optional": Optional, "Optimizer": Optimizer,
          "logger": logging.getLogger("kohya"), "DiffusersSchedulerType": DiffusersSchedulerType,
          "DIFFUSERS_TYPE_TO_SCHEDULER_FUNCTION": DIFFUSERS_TYPE_TO_SCHEDULER_FUNCTION,
          "SchedulerType": scheduler_type, "TYPE_TO_SCHEDULER_FUNCTION": type_to_function,
          "transformers": types.SimpleNamespace()}
    load_functions(KOHYA, {"get_scheduler_fix", "is_schedulefree_optimizer", "get_dummy_scheduler"}, ns)
    return ns["get_scheduler_fix"]


DEFAULTS = dict(lr_scheduler="constant", lr_scheduler_type="", lr_scheduler_args=None, lr_warmup_steps=0,
                lr_decay_steps=0, lr_scheduler_num_cycles=1, lr_scheduler_power=1.0, lr_scheduler_timescale=None,
                lr_scheduler_min_lr_ratio=None, optimizer_type="AdamW", max_train_steps=TOTAL)

# kohya's options that differ from its defaults, per case.
CASES = [
    dict(lr_scheduler="cosine_with_min_lr", lr_warmup_steps=10, lr_scheduler_min_lr_ratio=0.1),
    dict(lr_scheduler="cosine_with_min_lr", lr_scheduler_num_cycles=3, lr_scheduler_min_lr_ratio=0.05),
    dict(lr_scheduler="cosine_with_min_lr", lr_warmup_steps=0.1, lr_scheduler_args=["min_lr=2e-4"]),
    dict(lr_scheduler="warmup_stable_decay", lr_warmup_steps=10, lr_decay_steps=30, lr_scheduler_min_lr_ratio=0.1),
    dict(lr_scheduler="warmup_stable_decay", lr_warmup_steps=0.05, lr_decay_steps=0.25),
    dict(lr_scheduler="warmup_stable_decay", lr_warmup_steps=8, lr_decay_steps=40, lr_scheduler_num_cycles=2,
         lr_scheduler_min_lr_ratio=0.2, lr_scheduler_args=["warmup_type='cosine'", "decay_type='cosine'"]),
    dict(lr_scheduler="warmup_stable_decay", lr_warmup_steps=12, lr_decay_steps=50,
         lr_scheduler_args=["warmup_type='1-sqrt'", "decay_type='linear'"]),
    dict(lr_scheduler="warmup_stable_decay", lr_warmup_steps=6, lr_decay_steps=20,
         lr_scheduler_args=["decay_type='1-sqrt'"], lr_scheduler_min_lr_ratio=0.01),
    dict(lr_scheduler="warmup_stable_decay", lr_warmup_steps=10),
    dict(lr_scheduler="inverse_sqrt", lr_warmup_steps=10),
    dict(lr_scheduler="inverse_sqrt"),
    dict(lr_scheduler="inverse_sqrt", lr_warmup_steps=5, lr_scheduler_timescale=25),
    dict(lr_scheduler="piecewise_constant", lr_scheduler_args=["step_rules='1:10,0.1:20,0.01:30,0.005'"]),
    dict(lr_scheduler="piecewise_constant", lr_scheduler_args=["step_rules='0.5:40,1:10,0.25'"]),
    dict(lr_scheduler="piecewise_constant", lr_scheduler_args=["step_rules='0.3'"]),
    dict(lr_scheduler="cosine", lr_warmup_steps=10, lr_scheduler_args=["num_cycles=1.5"]),
    dict(lr_scheduler="polynomial", lr_warmup_steps=10, lr_scheduler_power=2.0, lr_scheduler_args=["lr_end=1e-5"]),
    dict(lr_scheduler_type="CosineAnnealingLR", lr_scheduler_args=["T_max=50"]),
    dict(lr_scheduler_type="torch.optim.lr_scheduler.CosineAnnealingLR", lr_scheduler_args=["T_max=200"]),
    dict(lr_scheduler_type="CosineAnnealingWarmRestarts", lr_scheduler_args=["T_0=20", "T_mult=2"]),
    dict(lr_scheduler_type="CosineAnnealingWarmRestarts", lr_scheduler_args=["T_0=15"]),
    dict(lr_scheduler_type="StepLR", lr_scheduler_args=["step_size=25", "gamma=0.5"]),
    dict(lr_scheduler_type="StepLR", lr_scheduler_args=["step_size=7"]),
    dict(lr_scheduler_type="ExponentialLR", lr_scheduler_args=["gamma=0.97"]),
    dict(lr_scheduler_type="LinearLR", lr_scheduler_args=["start_factor=0.25", "total_iters=40"]),
    dict(lr_scheduler_type="LinearLR"),
    dict(lr_scheduler_type="LinearLR", lr_scheduler_args=["start_factor=1.0", "end_factor=0.1", "total_iters=100"]),
    dict(lr_scheduler_type="PolynomialLR", lr_scheduler_args=["total_iters=100", "power=2.0"]),
    dict(lr_scheduler_type="PolynomialLR"),
    dict(lr_scheduler_type="OneCycleLR", lr_scheduler_args=["max_lr=1e-3", "total_steps=135", "cycle_momentum=False"]),
    dict(lr_scheduler_type="OneCycleLR", lr_scheduler_args=["max_lr=2e-3", "total_steps=140", "cycle_momentum=False",
                                                            "anneal_strategy='linear'", "three_phase=True",
                                                            "pct_start=0.25", "div_factor=10.0"]),
    dict(lr_scheduler_type="OneCycleLR", lr_scheduler_args=["max_lr=1e-3", "epochs=3", "steps_per_epoch=45",
                                                            "cycle_momentum=False", "final_div_factor=100"]),
]


def trajectory(get_scheduler_fix, options):
    args = argparse.Namespace(**{**DEFAULTS, **options})
    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.AdamW([param], lr=BASE_LR)
    sched = get_scheduler_fix(args, opt, 1)
    lrs = []
    total = None
    for a in options.get("lr_scheduler_args") or []:
        k, v = a.split("=")
        if k == "total_steps":
            total = int(v)
        if k == "steps_per_epoch":
            total = 3 * int(v)
    for k in range(STEPS if total is None else min(STEPS, total)):
        lrs.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    return lrs


def main():
    fix = kohya_get_scheduler_fix()
    cases = []
    for options in CASES:
        cases.append(dict(options={**DEFAULTS, **options}, base_lr=BASE_LR, lr=trajectory(fix, options)))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(dict(total_steps=TOTAL, cases=cases)) + "\n")
    print(len(cases), "cases")


if __name__ == "__main__":
    main()
