#!/usr/bin/env python3
"""Golden data for kohya's face crop (data/face_crop.h), checked by tests/test_data_face_crop.cpp.

kohya's own BaseDataset.load_image_with_face_info and BaseDataset.crop_target (library/train_util.py)
and resize_image (library/utils.py, as make_data_resize_interp.py takes it) are taken from
sd-scripts' source and run as they are on synthetic images whose file names carry face boxes
(<name>_<cx>_<cy>_<w>_<h>.png), with kohya's `random` replaced by a seeded random.Random that
records every call (uniform / randint, its arguments and the value drawn): the test feeds the
same values to our plan and checks the arguments it asks with.

Writes tests/golden/data/kohya/face_crop/:
  cases.json       per case: file, target [w, h], range [lo, hi], random_crop, kohya's parsed box
                   [cx, cy, w, h], its draws [[kind, a, b, value], ...], the output size
  <file>           the source image (PNG, named with its face box)
  <case>.out.png   kohya's crop_target output
  and in cases.json "names": file names -> kohya's [cx, cy, w, h] (0s: no box), or "error" where its
  int() raises
Run: ~/venv-golden/bin/python tests/golden/make_kohya_face_crop.py [sd-scripts folder]
Deterministic.
"""
import ast
import json
import os
import random
import shutil
import sys
import types

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_data_resize_interp  # noqa: E402
from make_data_resize import picture  # noqa: E402

SD_SCRIPTS = sys.argv[1] if len(sys.argv) > 1 else "/work/ref/sd-scripts"
make_data_resize_interp.SD_SCRIPTS = SD_SCRIPTS
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "kohya", "face_crop")

# (image w, h, face cx, cy, w, h, target w, h, range, random_crop)
CASES = [
    (200, 160, 100, 70, 50, 60, 64, 48, (2.0, 4.0), False),  # a random scale and the jitter
    (200, 160, 100, 70, 50, 60, 64, 48, (2.0, 4.0), True),   # random_crop's two draws per axis
    (200, 160, 100, 70, 50, 60, 64, 48, (3.0, 3.0), False),  # one scale: no draw at all
    (180, 150, 60, 90, 20, 16, 64, 48, (1.5, 3.0), False),   # a small face: no jitter
    (64, 48, 30, 20, 44, 44, 64, 48, (2.0, 4.0), True),      # the resolution already: kept
    (200, 160, 190, 5, 48, 40, 64, 48, (2.0, 4.0), False),   # a face at the corner: clamped
    (90, 300, 45, 250, 30, 30, 64, 48, (1.0, 2.0), True),    # tall, random_crop
    (130, 100, 65, 50, 40, 40, 64, 48, (0.5, 1.0), False),   # scale 1: a same-size resize, then the crop
    (150, 150, 70, 40, 80, 70, 48, 64, (1.2, 5.0), False),   # a portrait resolution, a large face
    (151, 149, 75, 74, 41, 39, 48, 64, (2.0, 2.5), True),
]
NAMES = ["plain.png", "a_b_c_d.png", "x_1_2_3_4.png", "IMG_2023_01_01_photo.png", "p_+7_ 8_-9_10.png",
         "q_r_s_0_5_0_0.png", "many_parts_here_12_34_56_78.jpg", "x__1_2_3.png", "x_1_2_3_4.5.png"]


class Recorder:
    """Python's random as crop_target calls it, each call written down."""

    def __init__(self, seed):
        self.r = random.Random(seed)
        self.calls = []

    def uniform(self, a, b):
        v = self.r.uniform(a, b)
        self.calls.append(["uniform", a, b, v])
        return v

    def randint(self, a, b):
        v = self.r.randint(a, b)
        self.calls.append(["randint", a, b, v])
        return v


def kohya_methods(rec, utils, load_image=None):
    path = os.path.join(SD_SCRIPTS, "library", "train_util.py")
    src = open(path, encoding="utf-8").read()
    cls = next(n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.ClassDef) and n.name == "BaseDataset")
    ns = {"np": np, "random": rec, "os": os, "resize_image": utils["resize_image"], "BaseSubset": object,
          "load_image": load_image or (lambda p, alpha=False: np.array(Image.open(p).convert("RGB"), np.uint8))}
    for n in cls.body:
        if isinstance(n, ast.FunctionDef) and n.name in ("crop_target", "load_image_with_face_info"):
            exec(compile(ast.Module(body=[n], type_ignores=[]), path, "exec"), ns)
    return ns["crop_target"], ns["load_image_with_face_info"]


def main():
    utils = make_data_resize_interp.kohya_utils()
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    cases = []
    for i, (w, h, cx, cy, fw, fh, tw, th, rng_, rc) in enumerate(CASES):
        name = f"face{i:02d}_{cx}_{cy}_{fw}_{fh}.png"
        Image.fromarray(picture(w, h, 3, 100 + i)).save(os.path.join(OUT, name))
        rec = Recorder(1000 + i)
        crop_target, load_with_face = kohya_methods(rec, utils)
        subset = types.SimpleNamespace(face_crop_aug_range=rng_, random_crop=rc, resize_interpolation=None)
        self = types.SimpleNamespace(width=tw, height=th)
        img, pcx, pcy, pw, ph = load_with_face(self, subset, os.path.join(OUT, name))
        out = crop_target(self, subset, img, pcx, pcy, pw, ph)
        assert out.shape[:2] == (th, tw), out.shape
        Image.fromarray(np.ascontiguousarray(out)).save(os.path.join(OUT, f"c{i:02d}.out.png"))
        cases.append({"case": f"c{i:02d}", "file": name, "target": [tw, th], "range": list(rng_), "random_crop": rc,
                      "box": [pcx, pcy, pw, ph], "draws": rec.calls})
    # kohya's parse of the name alone (its load_image replaced by nothing)
    names = {}
    _, load_with_face = kohya_methods(Recorder(0), utils, load_image=lambda p, alpha=False: None)
    subset = types.SimpleNamespace(face_crop_aug_range=(2.0, 4.0))
    for n in NAMES:
        try:
            _, *box = load_with_face(None, subset, n)
            names[n] = box
        except ValueError:
            names[n] = "error"
    with open(os.path.join(OUT, "cases.json"), "w") as f:
        json.dump({"cases": cases, "names": names}, f, indent=1)


if __name__ == "__main__":
    main()
