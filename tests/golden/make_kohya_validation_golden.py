#!/usr/bin/env python3
"""kohya's validation loss rules (train_network.py and library/train_util.py, taken from sd-scripts'
own source and run here as they are), for train/run/validation.h:
  timesteps: the validation timesteps train_network.py computes (its NUM_VALIDATION_TIMESTEPS and
             np.linspace statements) for a (min_timestep, max_timestep) range;
  recorder:  kohya's LossRecorder fed a sequence of (epoch, step, loss), the moving average after
             each add (the way the validation passes of several epochs feed it).
Writes tests/golden/data/kohya/validation.json. Deterministic.

  ~/venv-golden/bin/python tests/golden/make_kohya_validation_golden.py [sd-scripts folder]
"""
import ast
import json
import os
import random
import sys
import typing

import numpy as np

SD_SCRIPTS = sys.argv[1] if len(sys.argv) > 1 else "/work/ref/sd-scripts"
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "kohya", "validation.json")


def kohya_timesteps_code(path):
    """The two statements of train_network.py that make validation_timesteps."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    wanted = {"NUM_VALIDATION_TIMESTEPS": None, "validation_timesteps": None}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id in wanted and wanted[node.targets[0].id] is None:
                wanted[node.targets[0].id] = node
    assert all(wanted.values()), wanted
    body = [wanted["NUM_VALIDATION_TIMESTEPS"], wanted["validation_timesteps"]]
    return compile(ast.Module(body=body, type_ignores=[]), path, "exec")


def kohya_class(path, name):
    tree = ast.parse(open(path, encoding="utf-8").read())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)
    ns = {"List": typing.List}
    exec(compile(ast.Module(body=[cls], type_ignores=[]), path, "exec"), ns)
    return ns[name]


def main():
    code = kohya_timesteps_code(os.path.join(SD_SCRIPTS, "train_network.py"))
    LossRecorder = kohya_class(os.path.join(SD_SCRIPTS, "library", "train_util.py"), "LossRecorder")
    out = {"numpy": np.__version__, "timesteps": [], "recorder": []}
    for lo, hi in [(0, 1000), (100, 900), (0, 999), (1, 7), (37, 991), (0, 1), (999, 1000), (3, 10), (250, 260),
                   (0, 5), (0, 6), (13, 14), (400, 401)]:
        ns = {"np": np, "min_timestep": lo, "max_timestep": hi}
        exec(code, ns)
        out["timesteps"].append({"min": lo, "max": hi, "timesteps": [int(t) for t in ns["validation_timesteps"]]})
    # Step passes of 8 losses: two in epoch 0 (appended), one in epoch 1 and one in epoch 2 (each
    # replacing the first 8), then a shorter pass of 5 and a longer one of 20 in epoch 3.
    rng = random.Random(5)
    rec = LossRecorder()
    adds = []
    for epoch, n in [(0, 8), (0, 8), (1, 8), (2, 8), (3, 5), (3, 20)]:
        for step in range(n):
            loss = rng.uniform(0.05, 0.4)
            rec.add(epoch=epoch, step=step, loss=loss)
            adds.append({"epoch": epoch, "step": step, "loss": loss, "average": rec.moving_average})
    out["recorder"] = adds
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print("wrote", OUT)


if __name__ == "__main__":
    main()
