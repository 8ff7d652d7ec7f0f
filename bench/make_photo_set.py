#!/usr/bin/env python3
"""A kohya folder of large photo-like images for timing the dataset read (bench_data --read-check):
--images files of --megapixels each (4:3), as JPEG (q95, 4:2:0, what cameras write) or PNG, in
<out>/1_photos/. The pictures are smooth shapes, mid-frequency texture and sensor-like grain, so
the files are about the size of real photos (JPEG ~1 bit per pixel, PNG ~13). Needs Pillow (the
golden venv). Deterministic.

  ~/venv-golden/bin/python bench/make_photo_set.py --out /tmp/photos_jpg --format jpeg
  ./build/bench_data --read-check /tmp/photos_jpg
"""
import argparse
import os

import numpy as np
from PIL import Image


def photo(w, h, rng):
    coarse = Image.fromarray(rng.integers(0, 256, (6, 8, 3), dtype=np.uint8)).resize((w, h), Image.BICUBIC)
    mid = Image.fromarray(rng.integers(0, 256, (h // 40, w // 40), dtype=np.uint8)).resize((w, h), Image.BICUBIC)
    img = np.asarray(coarse, np.float32) * 0.8 + (np.asarray(mid, np.float32)[..., None] - 128) * 0.25
    img += rng.normal(0, 4, (h, w, 1)).astype(np.float32)
    return Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--images", type=int, default=20)
    ap.add_argument("--megapixels", type=float, default=12)
    ap.add_argument("--format", choices=["jpeg", "png"], default="jpeg")
    a = ap.parse_args()
    h = int(round((a.megapixels * 1e6 * 3 / 4) ** 0.5))
    w = h * 4 // 3
    d = os.path.join(a.out, "1_photos")
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(a.images):
        p = os.path.join(d, f"photo{i:03d}." + ("jpg" if a.format == "jpeg" else "png"))
        if a.format == "jpeg":
            photo(w, h, rng).save(p, quality=95)
        else:
            photo(w, h, rng).save(p)
    print(f"{a.images} {w}x{h} {a.format.upper()} files in {d}")


if __name__ == "__main__":
    main()
