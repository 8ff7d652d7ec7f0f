#!/usr/bin/env python3
"""kohya's validation split (library/train_util.py split_train_val, taken from sd-scripts' own
source and run here as it is) and Python's `random` behind it, for data/validation_split.h:
  random:  the first words of random.seed(n) for a few n, and random.shuffle of range(k);
  split:   one listing of n names cut into its training and validation parts for a split and a
           validation seed;
  dataset: several subsets split as kohya's DreamBoothDataset does with and without a validation
           seed (without one, random.seed(--seed) as accelerate's set_seed, then the training
           dataset's subsets, then the validation dataset's, on one stream; regularisation
           subsets unsplit).
Writes tests/golden/data/kohya/validation_split.json. Deterministic.

  ~/venv-golden/bin/python tests/golden/make_validation_split_golden.py [sd-scripts folder]
"""
import ast
import json
import logging
import math
import os
import random
import sys
import typing

SD_SCRIPTS = sys.argv[1] if len(sys.argv) > 1 else "/work/ref/sd-scripts"
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "kohya", "validation_split.json")


def kohya_function(path, name):
    tree = ast.parse(open(path, encoding="utf-8").read())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    ns = {"random": random, "math": math, "logging": logging, "List": typing.List, "Tuple": typing.Tuple,
          "Optional": typing.Optional}
    code = compile(ast.Module(body=[fn], type_ignores=[]), path, "exec")
    exec(code, ns)
    return ns[name]


split_train_val = kohya_function(os.path.join(SD_SCRIPTS, "library", "train_util.py"), "split_train_val")


def names(n, prefix="img"):
    return ["%s%03d.png" % (prefix, i) for i in range(n)]


def main():
    logging.disable(logging.CRITICAL)
    out = {"random": [], "split": [], "dataset": []}
    for seed in [0, 1, 42, 12345, 2**32 - 1, 2**32, 2**63 + 5, -7]:
        random.seed(seed)
        words = [random.getrandbits(32) for _ in range(8)]
        random.seed(seed)
        order = list(range(23))
        random.shuffle(order)
        out["random"].append({"seed": seed, "words": words, "shuffle23": order})
    for n in [1, 2, 3, 5, 10, 13, 40, 101]:
        for share in [0.1, 0.15, 0.25, 0.5, 0.9, 1.0]:
            for vseed in [None, 0, 7, 31337]:
                files = names(n)
                if vseed is None:
                    random.seed(99)
                train, _ = split_train_val(files, [None] * n, True, share, vseed)
                if vseed is None:
                    random.seed(99)
                val, _ = split_train_val(files, [None] * n, False, share, vseed)
                out["split"].append({"n": n, "split": share, "validation_seed": vseed, "stream_seed": 99,
                                     "training": train, "validation": val})
    # (prefix, image count, is_reg): the subsets of one dataset, in order.
    subsets = [("a", 12, False), ("r", 6, True), ("b", 7, False), ("c", 12, False)]
    for run_seed, vseed, share in [(1234, None, 0.25), (1234, 5, 0.25), (2**32 - 3, None, 0.5), (77, 77, 0.1)]:
        random.seed(run_seed)
        parts = {}
        for part, training in [("training", True), ("validation", False)]:
            got = []
            for prefix, n, reg in subsets:
                files = names(n, prefix)
                if reg:
                    got.append(files if training else [])
                else:
                    got.append(split_train_val(files, [None] * n, training, share, vseed)[0])
            parts[part] = got
        out["dataset"].append({"run_seed": run_seed, "validation_seed": vseed, "split": share,
                               "subsets": [{"prefix": p, "n": n, "is_reg": r} for p, n, r in subsets], **parts})
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(out, f, separators=(",", ":"))
    print("wrote", OUT)


if __name__ == "__main__":
    main()
