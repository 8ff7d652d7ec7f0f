#!/usr/bin/env python3
"""Golden data for bucketing (data/bucket.cpp), checked by tests/test_data_bucket.cpp.

Runs kohya's own code: make_bucket_resolutions (library/model_util.py) and BucketManager
(library/train_util.py) are taken from a checkout of kohya-ss/sd-scripts (their source, exactly as
in the repository, executed here without the rest of train_util's imports) and asked for the
bucket of 230 image sizes (common photo / screen sizes, small and huge, extreme ratios, random)
under several settings, with and without bucket_no_upscale. Writes
tests/golden/data/dataset/buckets/buckets.txt:
  setting <name> <no_upscale 0|1> <res_w> <res_h> <min> <max> <steps>
  resos <w>x<h> ...            (the predefined resolutions; empty with no_upscale)
  <img_w> <img_h> <bucket_w> <bucket_h> <resized_w> <resized_h>   or  <img_w> <img_h> error
Usage: python make_data_buckets.py /path/to/sd-scripts   (a checkout or the git directory's work tree)
"""
import ast
import math
import os
import random
import subprocess
import sys
import types

import numpy as np

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "dataset", "buckets")


def source(repo, path):
    if os.path.isfile(os.path.join(repo, path)):
        with open(os.path.join(repo, path), encoding="utf-8") as f:
            return f.read()
    return subprocess.run(["git", "-C", repo, "show", "HEAD:" + path], check=True, capture_output=True,
                          text=True).stdout


def extract(src, name):
    tree = ast.parse(src)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            return ast.get_source_segment(src, node)
    raise KeyError(name)


def kohya(repo):
    ns = {"math": math, "np": np, "random": random, "Tuple": tuple, "logger": None}
    exec(extract(source(repo, "library/model_util.py"), "make_bucket_resolutions"), ns)
    ns["model_util"] = types.SimpleNamespace(make_bucket_resolutions=ns["make_bucket_resolutions"])
    exec("from typing import Tuple\n" + extract(source(repo, "library/train_util.py"), "BucketManager"), ns)
    return ns["BucketManager"]


SETTINGS = [  # name, no_upscale, (w, h), min, max, steps
    ("default512", False, (512, 512), 256, 1024, 64),
    ("wide768x512_s32", False, (768, 512), 320, 960, 32),
    ("big640", False, (640, 640), 256, 2048, 64),
    ("noup512", True, (512, 512), 256, 1024, 64),
    ("noup1024_s32", True, (1024, 1024), 256, 2048, 32),
]


def sizes():
    common = [(512, 512), (768, 512), (512, 768), (1024, 1024), (1024, 768), (768, 1024), (1920, 1080), (1080, 1920),
              (3000, 4000), (4000, 3000), (640, 480), (480, 640), (100, 100), (64, 64), (300, 2000), (2000, 300),
              (1, 1), (10000, 10), (10, 10000), (4096, 4096), (832, 1216), (1216, 832), (2048, 1536), (720, 1280),
              (1280, 720), (256, 256), (257, 255), (513, 511), (1023, 769), (6000, 4000)]
    rng = np.random.default_rng(3)
    out = list(common)
    while len(out) < 230:
        w = int(rng.integers(64, 4097))
        r = float(np.exp(rng.uniform(-1.3, 1.3)))
        out.append((w, max(1, int(w / r))))
    return out


def main():
    repo = sys.argv[1]
    BucketManager = kohya(repo)
    lines = []
    for name, noup, reso, lo, hi, steps in SETTINGS:
        bm = BucketManager(noup, reso, lo, hi, steps)
        if not noup:
            bm.make_buckets()
        lines.append(f"setting {name} {int(noup)} {reso[0]} {reso[1]} {lo} {hi} {steps}")
        resos = [] if noup else bm.predefined_resos
        lines.append("resos " + " ".join(f"{w}x{h}" for w, h in resos))
        for w, h in sizes():
            try:
                bucket, resized, _ = bm.select_bucket(w, h)
                lines.append(f"{w} {h} {bucket[0]} {bucket[1]} {resized[0]} {resized[1]}")
            except (ZeroDivisionError, AssertionError):
                lines.append(f"{w} {h} error")
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "buckets.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
