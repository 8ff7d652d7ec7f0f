#!/usr/bin/env python3
"""A kohya dataset for sdtrain's full-size run (bench/sdtrain_round.sh), made without any image
library: --images PNG files (zlib + struct) in three aspect ratios that land in three 512² buckets
(768x768 -> 512x512, 864x672 -> 576x448, 672x864 -> 448x576), each with a .txt caption of tags, in
<out>/<repeats>_sks/. Pictures are smooth gradients with a few discs and bars whose colours the
caption names, so a LoRA has something to learn. Deterministic: the same arguments give the same
bytes.

  python3 bench/make_sdtrain_dataset.py --out /tmp/sdtrain_data --images 120 --repeats 2
"""
import argparse
import os
import struct
import zlib

import numpy as np

SIZES = [(768, 768), (864, 672), (672, 864)]  # (width, height)
COLOURS = {"red": (220, 40, 40), "green": (40, 180, 60), "blue": (40, 70, 220), "yellow": (230, 210, 40),
           "purple": (150, 60, 190), "white": (240, 240, 240)}


def png_bytes(rgb):
    h, w, _ = rgb.shape
    raw = b"".join(b"\x00" + rgb[y].tobytes() for y in range(h))

    def chunk(kind, data):
        c = struct.pack(">I", len(data)) + kind + data
        return c + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))


def picture(i, w, h, rng):
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    names = list(COLOURS)
    bg = [names[(i + k) % len(names)] for k in range(2)]
    a, b = np.array(COLOURS[bg[0]], np.float32), np.array(COLOURS[bg[1]], np.float32)
    t = (x / w * np.cos(i) + y / h * np.sin(i) + 1.0) / 2.0
    img = a * (1 - t[..., None]) + b * t[..., None]
    shapes = []
    for _ in range(int(rng.integers(2, 5))):
        c = names[int(rng.integers(len(names)))]
        cx, cy, r = rng.uniform(0.15, 0.85) * w, rng.uniform(0.15, 0.85) * h, rng.uniform(0.05, 0.18) * min(w, h)
        if rng.uniform() < 0.5:
            mask = (x - cx) ** 2 + (y - cy) ** 2 < r * r
            shapes.append(f"{c} circle")
        else:
            mask = (abs(x - cx) < r * 1.6) & (abs(y - cy) < r * 0.4)
            shapes.append(f"{c} bar")
        img[mask] = COLOURS[c]
    caption = ", ".join(["sks", f"{bg[0]} and {bg[1]} gradient"] + shapes)
    return np.clip(img, 0, 255).astype(np.uint8), caption


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--images", type=int, default=120)
    ap.add_argument("--repeats", type=int, default=1)
    a = ap.parse_args()
    folder = os.path.join(a.out, f"{a.repeats}_sks")
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(1234)
    for i in range(a.images):
        w, h = SIZES[i % len(SIZES)]
        rgb, caption = picture(i, w, h, rng)
        with open(os.path.join(folder, f"{i:04d}.png"), "wb") as f:
            f.write(png_bytes(rgb))
        with open(os.path.join(folder, f"{i:04d}.txt"), "w") as f:
            f.write(caption + "\n")
    print(f"{a.images} images in {folder}")


if __name__ == "__main__":
    main()
