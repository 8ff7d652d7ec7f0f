#!/usr/bin/env python3
"""Golden data for kohya's resize_interpolation (data/resize.h resize_kohya), checked by
tests/test_data_resize.cpp.

kohya's own resize_image, pil_resize, get_cv2_interpolation and get_pil_interpolation
(library/utils.py) are taken from sd-scripts' source and run as they are, without the rest of
utils.py's imports, for each interpolation sdtrain reimplements ("lanczos", "box": Pillow;
"area": cv2 INTER_AREA, shrinking only) over sizes that shrink,
enlarge and mix. Pillow 13 starts with the vertical pass for some sizes; as make_data_resize.py
does, the Pillow resize kohya calls is pinned to the horizontal-first order of Pillow <= 12 (one
axis per call). Output in tests/golden/data/dataset/resize_interp/:
  cases.txt          one line per case: name sw sh channels dw dh interpolation
  <name>.src.png     the source;  <name>.out.png  kohya's output
Run: /work/venv-golden/bin/python tests/golden/make_data_resize_interp.py [sd-scripts folder]
"""
import ast
import os
import shutil
import sys
import types

import cv2
import numpy as np
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_data_resize import picture  # noqa: E402

SD_SCRIPTS = sys.argv[1] if len(sys.argv) > 1 else "/work/ref/sd-scripts"
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "dataset", "resize_interp")

SIZES = [  # (sw, sh, dw, dh, channels)
    (64, 48, 32, 24, 3), (63, 47, 31, 23, 3), (97, 61, 64, 40, 3), (160, 8, 64, 3, 3), (77, 51, 40, 26, 1),
    (32, 24, 64, 48, 3), (37, 23, 80, 50, 3), (1, 1, 8, 8, 3), (10, 3, 90, 27, 3), (64, 20, 48, 40, 3),
    (30, 60, 45, 41, 3), (33, 25, 70, 53, 1), (50, 40, 51, 40, 3), (5, 7, 3, 11, 3), (640, 9, 7, 5, 3),
]


class HorizontalFirstImage:
    """Pillow's Image module as kohya's pil_resize uses it, with resize one axis per call."""

    class _Img:
        def __init__(self, pil):
            self.pil = pil

        def resize(self, size, resample):
            pil = self.pil
            if size[0] != pil.size[0]:
                pil = pil.resize((size[0], pil.size[1]), resample=resample)
            if size[1] != pil.size[1]:
                pil = pil.resize(size, resample=resample)
            return pil

    Resampling = Image.Resampling

    @staticmethod
    def fromarray(a):
        return HorizontalFirstImage._Img(Image.fromarray(a))


def kohya_utils():
    path = os.path.join(SD_SCRIPTS, "library", "utils.py")
    src = open(path, encoding="utf-8").read()
    tree = ast.parse(src)
    ns = {"cv2": cv2, "np": np, "Image": HorizontalFirstImage, "Optional": __import__("typing").Optional,
          "logger": types.SimpleNamespace(debug=lambda *a: None)}
    for n in tree.body:
        if isinstance(n, ast.FunctionDef) and n.name in ("pil_resize", "resize_image", "get_cv2_interpolation",
                                                          "get_pil_interpolation", "validate_interpolation_fn"):
            exec(compile(ast.Module(body=[n], type_ignores=[]), path, "exec"), ns)
    return ns


def main():
    k = kohya_utils()
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    rng = np.random.default_rng(11)
    sizes = list(SIZES)
    for _ in range(10):
        sw, sh = (int(v) for v in rng.integers(8, 72, size=2))
        f = float(rng.uniform(0.3, 2.2))
        sizes.append((sw, sh, max(1, int(sw * f + 0.5)), max(1, int(sh * f + 0.5)), 3))
    lines = []
    n = 0
    for how in ("lanczos", "box", "area"):
        assert k["validate_interpolation_fn"](how)
        for (sw, sh, dw, dh, ch) in sizes:
            if how == "area" and (dw > sw or dh > sh):
                continue  # OpenCV enlarges with its bilinear path: not reimplemented, refused
            name = f"c{n:02d}"
            n += 1
            src = picture(sw, sh, ch, n)
            # kohya's images are BGR (its load_image converts); an RGB picture read as BGR is the same test
            img = src if ch == 3 else np.repeat(src[..., None], 3, axis=2)
            out = k["resize_image"](img, sw, sh, dw, dh, how)
            assert out.shape[:2] == (dh, dw), (how, out.shape)
            if ch == 1:
                assert (out[..., 0] == out[..., 1]).all() and (out[..., 0] == out[..., 2]).all()
                out = out[..., 0]
            Image.fromarray(src).save(os.path.join(OUT, name + ".src.png"))
            Image.fromarray(out).save(os.path.join(OUT, name + ".out.png"))
            lines.append(f"{name} {sw} {sh} {ch} {dw} {dh} {how}")
    with open(os.path.join(OUT, "cases.txt"), "w") as f:
        f.write(f"# opencv {cv2.__version__}, pillow {Image.__version__}\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
