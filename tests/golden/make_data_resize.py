#!/usr/bin/env python3
"""Golden data for resizing (data/resize.cpp), checked by tests/test_data_resize.cpp.

For each case a source picture (smooth gradients, hard-edged blocks and a little noise, so both
the flat and the ringing parts of the filters are exercised) and what kohya's resize_image gives:
cv2.resize(..., INTER_AREA) when the image shrinks on both axes, PIL Image.resize(LANCZOS)
otherwise (horizontal pass first, as Pillow <= 12 always does: see kohya_resize). Sizes cover integer factors (2x2 takes OpenCV's other rounding path, 3, 4), fractional
factors, one axis kept, extreme aspect ratios, enlarging, mixed (one axis up, one down), and 1 and
3 channels. Output in tests/golden/data/dataset/resize/:
  cases.txt          one line per case: name sw sh channels dw dh method(area|lanczos)
  <name>.src.png     the source;  <name>.out.png  the reference output
Run with the golden venv: /work/venv-golden/bin/python tests/golden/make_data_resize.py
"""
import os
import shutil

import cv2
import numpy as np
from PIL import Image

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "dataset", "resize")

FIXED = [  # (sw, sh, dw, dh, channels)
    (64, 48, 32, 24, 3), (63, 47, 31, 23, 3), (90, 60, 30, 20, 3), (96, 96, 24, 24, 3), (100, 75, 64, 48, 3),
    (97, 61, 64, 40, 3), (64, 48, 64, 40, 3), (64, 48, 50, 48, 3), (160, 8, 64, 3, 3), (7, 150, 3, 64, 3),
    (64, 48, 32, 24, 1), (77, 51, 40, 26, 1), (2, 2, 1, 1, 3),
    (32, 24, 64, 48, 3), (37, 23, 80, 50, 3), (20, 20, 64, 64, 3), (1, 1, 8, 8, 3), (10, 3, 90, 27, 3),
    (64, 20, 48, 40, 3), (30, 60, 45, 41, 3), (33, 25, 70, 53, 1), (50, 40, 51, 40, 3),
]


def picture(w, h, ch, seed):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([x * 255.0 / max(w - 1, 1), y * 255.0 / max(h - 1, 1), 128 + 100 * np.sin(x / 3.0 + y / 5.0)], -1)
    blocks = rng.integers(-60, 60, size=((h + 3) // 4, (w + 3) // 4, 3))
    img = base + np.kron(blocks, np.ones((4, 4, 1)))[:h, :w] + rng.integers(-2, 3, size=(h, w, 3))
    img = np.clip(np.rint(img), 0, 255).astype(np.uint8)
    return img[..., :ch] if ch == 3 else img[..., 0]


def kohya_resize(img, dw, dh):
    h, w = img.shape[:2]
    if w >= dw and h >= dh:
        return cv2.resize(img, (dw, dh), interpolation=cv2.INTER_AREA), "area"
    # Pillow up to 12.x always runs the horizontal pass first; Pillow 13 runs the vertical pass
    # first for some sizes (a few levels apart at edges). One axis per call pins the long-standing
    # order, which is what our reimplementation follows.
    pil = Image.fromarray(img)
    if dw != w:
        pil = pil.resize((dw, h), resample=Image.Resampling.LANCZOS)
    if dh != h:
        pil = pil.resize((dw, dh), resample=Image.Resampling.LANCZOS)
    return np.asarray(pil), "lanczos"


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    rng = np.random.default_rng(7)
    cases = list(FIXED)
    for _ in range(20):  # random sizes both ways, as bucketing produces them
        sw, sh = (int(v) for v in rng.integers(8, 72, size=2))
        f = float(rng.uniform(0.3, 2.2))
        cases.append((sw, sh, max(1, int(sw * f + 0.5)), max(1, int(sh * f + 0.5)), 3))
    lines = []
    for i, (sw, sh, dw, dh, ch) in enumerate(cases):
        name = f"c{i:02d}"
        src = picture(sw, sh, ch, i)
        out, method = kohya_resize(src, dw, dh)
        assert out.shape[:2] == (dh, dw)
        Image.fromarray(src).save(os.path.join(OUT, name + ".src.png"))
        Image.fromarray(out).save(os.path.join(OUT, name + ".out.png"))
        lines.append(f"{name} {sw} {sh} {ch} {dw} {dh} {method}")
    with open(os.path.join(OUT, "cases.txt"), "w") as f:
        f.write(f"# opencv {cv2.__version__}, pillow {Image.__version__}\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
