#!/usr/bin/env python3
"""Golden data for tests/test_data_npz.cpp: a latent cache file written by kohya's own caching code
(library/strategy_sd.py's SdSdxlLatentsCachingStrategy with cache_to_disk, SD1 suffix `_sd.npz`,
run as it is) for one small PNG, with a tiny randomly initialised diffusers AutoencoderKL (three
downsamplings: latent stride 8, 4 latent channels).

Writes tests/golden/data/kohya/npz/:
  img.png                  RGB 72x32 (random pixels, seed 0)
  img_0072x0032_sd.npz     kohya's file: bucket 32x16, resized 36x16 (centre crop x 2), flip_aug
                           (np.savez: stored zip members, numpy's zip64 local headers)
  deflated_sd.npz          the same arrays through np.savez_compressed (deflated members)
  noflip_sd.npz            the same without "latents_flipped" (np.savez)
  intlatents_sd.npz        the same with int32 latents (np.savez)
  expected.txt             what our reader must give: "latents" then "latents_flipped", each
                           the values [h][w][c] (kohya keeps [c][h][w]) of the raw latent sample,
                           one per line (%.9g); then original_size and crop_ltrb as kohya wrote them
Kohya keeps the VAE's sample WITHOUT the scaling factor (train_network multiplies by 0.18215 when a
batch is drawn); this script asserts that by re-encoding with the same generator state.
Run with the golden venv: ~/venv-golden/bin/python tests/golden/make_kohya_npz.py [sd-scripts]
Deterministic.
"""
import ast
import os
import sys
import types

import numpy as np
import torch
from PIL import Image

SD_SCRIPTS = sys.argv[1] if len(sys.argv) > 1 else "/work/ref/sd-scripts"
sys.path.insert(0, SD_SCRIPTS)
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "kohya", "npz")

from diffusers import AutoencoderKL  # noqa: E402  (before the stand-in below)


def torchvision_stand_in():
    """train_util imports torchvision for IMAGE_TRANSFORMS only (ToTensor then Normalize(0.5, 0.5));
    when this venv has no torchvision, those two are stood in for by what they compute."""
    try:
        import torchvision  # noqa: F401
        return
    except ImportError:
        pass

    class Compose:
        def __init__(self, fs):
            self.fs = fs

        def __call__(self, x):
            for f in self.fs:
                x = f(x)
            return x

    class ToTensor:
        def __call__(self, a):  # HWC uint8 -> CHW float in [0, 1]
            return torch.from_numpy(np.ascontiguousarray(a)).permute(2, 0, 1).float().div(255)

    class Normalize:
        def __init__(self, mean, std):
            self.mean, self.std = mean[0], std[0]

        def __call__(self, t):
            return (t - self.mean) / self.std

    class Dummy:
        def __getattr__(self, name):
            return Dummy

    tv = types.ModuleType("torchvision")
    tv.transforms = types.SimpleNamespace(Compose=Compose, ToTensor=ToTensor, Normalize=Normalize)
    for name in ("InterpolationMode", "functional", "Resize", "CenterCrop", "RandomCrop"):
        setattr(tv.transforms, name, Dummy())
    sys.modules["torchvision"] = tv
    sys.modules["torchvision.transforms"] = tv.transforms


def train_util_stand_in():
    """Importing train_util pulls in the whole trainer (and transformers APIs this venv's diffusers
    lacks): the caching strategy needs only its image loading, so `library.train_util` is a module
    made of train_util's own load_image, trim_and_resize_if_required,
    load_images_and_masks_for_caching, BucketManager and IMAGE_TRANSFORMS, taken from its source."""
    import logging
    import random
    from typing import Any, List, Optional, Tuple, Union

    import library
    from library.utils import resize_image
    from torchvision import transforms

    source = open(os.path.join(SD_SCRIPTS, "library", "train_util.py"), encoding="utf-8").read()
    wanted = {"load_image", "trim_and_resize_if_required", "load_images_and_masks_for_caching", "BucketManager"}
    body = []
    for n in ast.parse(source).body:
        if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name in wanted:
            body.append(n)
        elif isinstance(n, ast.Assign) and any(getattr(t, "id", None) == "IMAGE_TRANSFORMS" for t in n.targets):
            body.append(n)
    assert len(body) == len(wanted) + 1, "sd-scripts' train_util no longer has the caching helpers"
    tu = types.ModuleType("library.train_util")
    tu.__dict__.update(np=np, torch=torch, Image=Image, random=random, math=__import__("math"), os=os,
                       resize_image=resize_image, transforms=transforms, logger=logging.getLogger("train_util"),
                       List=List, Tuple=Tuple, Optional=Optional, Any=Any, Union=Union, ImageInfo=object,
                       HIGH_VRAM=True, clean_memory_on_device=lambda device: None)
    exec(compile(ast.Module(body=body, type_ignores=[]), "train_util.py", "exec"), tu.__dict__)
    sys.modules["library.train_util"] = tu
    library.train_util = tu


torchvision_stand_in()
train_util_stand_in()
from library import strategy_sd  # noqa: E402


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(0)
    img_path = os.path.join(OUT, "img.png")
    Image.fromarray(rng.integers(0, 256, (32, 72, 3), dtype=np.uint8), "RGB").save(img_path)

    torch.manual_seed(0)
    vae = AutoencoderKL(
        in_channels=3, out_channels=3, latent_channels=4,
        down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4,
        block_out_channels=(8, 8, 8, 8), layers_per_block=1, norm_num_groups=4, sample_size=32,
    ).eval()

    strategy = strategy_sd.SdSdxlLatentsCachingStrategy(True, True, 1, False)
    npz_path = strategy.get_latents_npz_path(img_path, (72, 32))
    assert os.path.basename(npz_path) == "img_0072x0032_sd.npz", npz_path
    if os.path.exists(npz_path):
        os.remove(npz_path)
    info = types.SimpleNamespace(absolute_path=img_path, image=None, bucket_reso=(32, 16), resized_size=(36, 16),
                                 resize_interpolation=None, latents_npz=npz_path)
    torch.manual_seed(1)
    strategy.cache_batch_latents(vae, [info], flip_aug=True, alpha_mask=False, random_crop=False)
    assert strategy.is_disk_cached_latents_expected((32, 16), npz_path, True, False)

    npz = np.load(npz_path)
    print({k: (npz[k].dtype, npz[k].shape) for k in npz.files})
    lat, flp = npz["latents"], npz["latents_flipped"]
    assert lat.shape == (4, 2, 4) and lat.dtype == np.float32

    # The stored values are the raw sample: the same encode with the same generator state.
    from library import train_util
    img, _, _, _ = train_util.load_images_and_masks_for_caching([info], False, False)
    torch.manual_seed(1)
    with torch.no_grad():
        z = vae.encode(img).latent_dist.sample()
    assert np.array_equal(z[0].numpy(), lat), "kohya's latents are not the raw sample"

    np.savez_compressed(os.path.join(OUT, "deflated_sd.npz"), **{k: npz[k] for k in npz.files})
    # Files kohya's rule refuses (or ours): no mirror for a flip_aug subset; integer latents.
    np.savez(os.path.join(OUT, "noflip_sd.npz"), **{k: npz[k] for k in npz.files if k != "latents_flipped"})
    np.savez(os.path.join(OUT, "intlatents_sd.npz"), **{k: (npz[k].astype(np.int32) if k.startswith("latents")
                                                           else npz[k]) for k in npz.files})
    with open(os.path.join(OUT, "expected.txt"), "w") as f:
        for a in (lat, flp):
            for v in a.transpose(1, 2, 0).reshape(-1):
                f.write("%.9g\n" % v)
        f.write(" ".join(str(int(v)) for v in npz["original_size"]) + "\n")
        f.write(" ".join(str(int(v)) for v in npz["crop_ltrb"]) + "\n")


if __name__ == "__main__":
    main()
