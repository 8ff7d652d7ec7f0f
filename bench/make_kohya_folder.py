#!/usr/bin/env python3
"""A kohya training folder shaped like a real one, for sdtrain's runs on the GPU machine
(bench/autofit_round.sh): photo-like pictures in 20 aspect ratios (14 buckets at 512²),
two subsets with 10 and 3 repeats (<out>/train/10_person, 3_style), a regularisation folder
(<out>/reg/1_person), a folder without a repeat count (skipped with a warning), JPEG (4:2:0, q92)
and PNG files among them RGBA, grey and 16-bit PNGs and a unicode file name, .txt captions, and one
damaged JPEG (its scan cut short) that the plan must name. Needs Pillow and numpy. Deterministic.

  python3 bench/make_kohya_folder.py --out /tmp/kohya --megapixels 1.5
"""
import argparse
import io
import os

import numpy as np
from PIL import Image

# width / height of cameras, phones and crops people train on
RATIOS = [1.0, 1.25, 0.8, 4 / 3, 3 / 4, 1.5, 2 / 3, 16 / 9, 9 / 16, 2.0, 0.5, 2.4, 1 / 2.4, 1.6, 0.625, 3.25, 1 / 3.25,
          3.75, 1 / 3.75, 4.0]


def photo(w, h, rng):
    coarse = Image.fromarray(rng.integers(0, 256, (6, 8, 3), dtype=np.uint8)).resize((w, h), Image.BICUBIC)
    mid = Image.fromarray(rng.integers(0, 256, (max(2, h // 40), max(2, w // 40)), dtype=np.uint8)).resize(
        (w, h), Image.BICUBIC)
    img = np.asarray(coarse, np.float32) * 0.8 + (np.asarray(mid, np.float32)[..., None] - 128) * 0.25
    img += rng.normal(0, 4, (h, w, 1)).astype(np.float32)
    return np.clip(img, 0, 255).astype(np.uint8)


def size_of(ratio, megapixels):
    h = int(round((megapixels * 1e6 / ratio) ** 0.5))
    return max(64, int(round(h * ratio))), max(64, h)


def save(path, rgb, kind):
    if kind == "jpeg":
        Image.fromarray(rgb).save(path, "JPEG", quality=92, subsampling=2)
    elif kind == "rgba":
        a = np.full(rgb.shape[:2], 255, np.uint8)
        a[: rgb.shape[0] // 4] = 90
        Image.fromarray(np.dstack([rgb, a])).save(path, "PNG")
    elif kind == "grey":
        Image.fromarray(rgb.mean(axis=2).astype(np.uint8)).save(path, "PNG")
    elif kind == "png16":
        Image.fromarray(rgb[..., 0].astype(np.uint16) * 257).save(path, "PNG")
    else:
        Image.fromarray(rgb).save(path, "PNG")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--megapixels", type=float, default=1.5)
    a = ap.parse_args()
    rng = np.random.default_rng(68)
    kinds = ["jpeg", "jpeg", "png", "jpeg", "rgba", "jpeg", "grey", "jpeg", "png16", "jpeg"]
    folders = [("train/10_person", 40, "person"), ("train/3_style", 22, "style"), ("reg/1_person", 2, "person"),
               ("train/misc", 3, "misc")]
    n = 0
    for folder, count, token in folders:
        d = os.path.join(a.out, folder)
        os.makedirs(d, exist_ok=True)
        for i in range(count):
            w, h = size_of(RATIOS[n % len(RATIOS)], a.megapixels)
            kind = kinds[n % len(kinds)]
            name = "café_ü_%02d" % i if (folder.endswith("person") and i == 7) else "%s_%02d" % (token, i)
            path = os.path.join(d, name + (".jpg" if kind == "jpeg" else ".png"))
            save(path, photo(w, h, rng), kind)
            with open(os.path.join(d, name + ".txt"), "w", encoding="utf-8") as f:
                f.write("%s, photo %d, %s light" % (token, n, ["warm", "cold", "soft"][n % 3]))
            n += 1
    # One damaged file: a JPEG whose entropy-coded data is cut and filled with garbage.
    buf = io.BytesIO()
    Image.fromarray(photo(640, 480, rng)).save(buf, "JPEG", quality=90)
    data = bytearray(buf.getvalue())
    cut = len(data) // 2
    data[cut:cut + 4096] = bytes(rng.integers(0, 256, 4096, dtype=np.uint8))
    with open(os.path.join(a.out, "train/10_person/damaged_00.jpg"), "wb") as f:
        f.write(bytes(data))
    print("kohya folder: %d pictures in %s (train/10_person, train/3_style, reg/1_person, train/misc) + 1 damaged"
          % (n, a.out))


if __name__ == "__main__":
    main()
