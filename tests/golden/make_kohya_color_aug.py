#!/usr/bin/env python3
"""Golden data for tests/test_data_color_aug.cpp: kohya's color_aug (library/train_util.py's
AugHelper.color_aug, taken from sd-scripts' own source and run as it is, with cv2 and numpy of this
venv) on fixed images, its random draws replaced by given values so that each branch runs with a
chosen hue shift or gamma.

Writes tests/golden/data/kohya/color_aug.safetensors:
  image          u8 [48, 48, 3]: random pixels, every grey, and a walk over the RGB cube's faces
  hue_<i>        u8 [48, 48, 3]: the image after the hue branch with draw u_i (shift -8 + 16 u_i)
  gamma_<i>      u8 [48, 48, 3]: the image after the gamma branch with draw u_i (0.95 + 0.1 u_i)
The draws u_i are DRAWS below (tests/test_data_color_aug.cpp holds the same list).
Run with the golden venv: ~/venv-golden/bin/python tests/golden/make_kohya_color_aug.py [sd-scripts]
Deterministic.
"""
import ast
import os
import sys

import cv2
import numpy as np
import torch
from safetensors.torch import save_file

SD_SCRIPTS = sys.argv[1] if len(sys.argv) > 1 else "/work/ref/sd-scripts"
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "kohya", "color_aug.safetensors")
DRAWS = [0.0, 0.03125, 0.37, 0.4999, 0.5001, 0.8, 0.999999]


class Draws:
    """Python's random as color_aug calls it: random() and uniform(a, b) = a + (b - a) * random()."""

    def __init__(self, values):
        self.values = list(values)

    def random(self):
        return self.values.pop(0)

    def uniform(self, a, b):
        return a + (b - a) * self.random()


def color_aug_of(draws):
    path = os.path.join(SD_SCRIPTS, "library", "train_util.py")
    src = open(path, encoding="utf-8").read()
    cls = next(n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.ClassDef) and n.name == "AugHelper")
    ns = {"np": np, "cv2": cv2, "random": draws}
    exec(compile(ast.get_source_segment(src, cls), path, "exec"), ns)
    return ns["AugHelper"]().color_aug


def image():
    rng = np.random.default_rng(7)
    img = rng.integers(0, 256, (48, 48, 3), dtype=np.uint8)
    img[0, :, :] = np.arange(48, dtype=np.uint8)[:, None] * 5 + 3  # greys (saturation 0)
    img[1, :, :] = np.arange(48, dtype=np.uint8)[:, None] * 5
    cube = [(r, g, b) for r in range(0, 256, 17) for g in range(0, 256, 17) for b in range(0, 256, 17)
            if 0 in (r, g, b) or 255 in (r, g, b)]
    flat = img.reshape(-1, 3)
    flat[128:128 + len(cube)] = np.array(cube, dtype=np.uint8)
    return img


def main():
    img = image()
    out = {"image": torch.from_numpy(img.copy())}
    for i, u in enumerate(DRAWS):
        # random() <= 0.33 takes the branch; > 0.5 the hue shift, else the gamma.
        out[f"hue_{i}"] = torch.from_numpy(color_aug_of(Draws([0.1, 0.9, u]))(img.copy())["image"].copy())
        out[f"gamma_{i}"] = torch.from_numpy(color_aug_of(Draws([0.1, 0.2, u]))(img.copy())["image"].copy())
    assert (color_aug_of(Draws([0.34]))(img.copy())["image"] == img).all()  # no branch: unchanged
    save_file(out, OUT)
    print(f"wrote {OUT} (cv2 {cv2.__version__}, numpy {np.__version__})")


if __name__ == "__main__":
    main()
