#!/usr/bin/env python3
"""diffusers' side of bench_data's latent caching: AutoencoderKL.encode(...).latent_dist.sample()
on a CUDA GPU in bf16 at the given size and batch, images per second (the figure kohya's
cache_latents reaches with the same VAE). Weights: a diffusers vae/ folder, or random SD1.5-shaped
weights when none is given (speed does not depend on the values).
Usage: python bench/bench_vae_diffusers.py [--vae DIR] [--size 512] [--batch 8] [--iters 20]
"""
import argparse
import time

import torch
from diffusers import AutoencoderKL


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vae", default=None)
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--iters", type=int, default=20)
    a = ap.parse_args()
    vae = AutoencoderKL.from_pretrained(a.vae) if a.vae else AutoencoderKL(
        down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4,
        block_out_channels=(128, 256, 512, 512), layers_per_block=2, latent_channels=4)
    vae = vae.to("cuda", torch.bfloat16).eval()
    x = torch.rand(a.batch, 3, a.size, a.size, device="cuda", dtype=torch.bfloat16) * 2 - 1
    with torch.no_grad():
        for _ in range(3):
            vae.encode(x).latent_dist.sample()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(a.iters):
            (vae.encode(x).latent_dist.sample() * 0.18215).float().cpu()
        torch.cuda.synchronize()
        s = time.perf_counter() - t0
    print(f"diffusers AutoencoderKL.encode bf16 {a.size}x{a.size} batch {a.batch}: "
          f"{a.batch * a.iters / s:.1f} images/s, peak {torch.cuda.max_memory_allocated() / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()
