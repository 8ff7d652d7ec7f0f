#!/usr/bin/env python3
"""The PyTorch side of the presets table (bench/presets_round.sh runs it after bench_presets).

The seed's 8 GB kohya preset as PyTorch runs it: the SD1.5 UNet (diffusers, random weights) frozen
in fp16, LoRA rank 16 (peft) on kohya's default targets with fp32 masters, gradient checkpointing,
fp16 autocast with GradScaler, bitsandbytes AdamW8bit (torch's fused AdamW when bitsandbytes does not
import: said in the output), text-encoder outputs cached (a random context). Per image size:
  preset  batch 1 x accumulation 8 (an optimizer step every 8 micro-batches): ms/image and memory;
  sweep   batches 1, 2, 4, 8, 12, 16, 24, 32, 48, 64, ... without accumulation, until the process
          needs more than the largest card (or --budget seconds are spent): ms/image and memory;
          per card, the largest batch of the sweep that fits.
Memory is the process's, CUDA context included: cudaMemGetInfo's bytes in use after the steps (the
caching allocator keeps what it reserved; it is emptied between configurations) less nvidia-smi's
figure before this process made its context; torch's max_memory_allocated / max_memory_reserved
beside it. Times: CUDA events around whole steps, the median after warm-up.
Prints JSON lines and two markdown tables; writes $OUT/presets_torch.json.
Usage: python3 bench/presets_torch.py [--sizes 512,768] [--cards 6G,8G,12G,16G,24G] [--budget 150]
Needs diffusers and peft importable, bitsandbytes optionally (PYTHONPATH).
"""
import argparse
import json
import os
import subprocess
import time

import torch
import torch.nn.functional as F

OUT = os.environ.get("OUT", "/tmp")
# The SD1.5 UNet (runwayml/stable-diffusion-v1-5 unet/config.json) and kohya's LoRA targets for it.
SD15 = dict(sample_size=64, in_channels=4, out_channels=4, layers_per_block=2, block_out_channels=(320, 640, 1280, 1280),
            down_block_types=("CrossAttnDownBlock2D",) * 3 + ("DownBlock2D",),
            up_block_types=("UpBlock2D",) + ("CrossAttnUpBlock2D",) * 3, cross_attention_dim=768,
            attention_head_dim=8, norm_num_groups=32, act_fn="silu")
KOHYA_TARGETS = ["to_q", "to_k", "to_v", "to_out.0", "proj_in", "proj_out", "ff.net.0.proj", "ff.net.2"]
SWEEP = [1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128]
MIB = 2 ** 20
records = []


def log(**rec):
    print(json.dumps(rec), flush=True)
    records.append(rec)


def size_bytes(text):
    units = {"": 1, "K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30, "T": 2 ** 40}
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = t[-1] if t and t[-1] in units else ""
    return int(float(t[: len(t) - len(unit)]) * units[unit])


def smi_used_mib():
    """nvidia-smi's memory.used of the first visible device (MiB), None when it does not answer."""
    dev = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0]
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", dev],
                             capture_output=True, text=True, timeout=20).stdout
        return float(out.split()[0])
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None


def used_bytes():
    free, total = torch.cuda.mem_get_info()
    return total - free


def build(optimizer):
    from diffusers import UNet2DConditionModel
    from peft import LoraConfig
    with torch.device("cuda"):
        unet = UNet2DConditionModel(**SD15)
    unet.requires_grad_(False)
    unet.to(dtype=torch.float16)
    unet.add_adapter(LoraConfig(r=16, lora_alpha=16, init_lora_weights="gaussian", target_modules=KOHYA_TARGETS))
    params = [p for p in unet.parameters() if p.requires_grad]
    for p in params:
        p.data = p.data.float()  # fp32 masters: GradScaler unscales fp32 gradients only
    unet.enable_gradient_checkpointing()
    unet.train()
    if optimizer == "bnb":
        import bitsandbytes as bnb
        opt = bnb.optim.AdamW8bit(params, lr=1e-4)
    else:
        opt = torch.optim.AdamW(params, lr=1e-4, fused=True)
    return unet, opt


def measure(unet, opt, size, batch, accum, steps, warmup):
    """ms per image and the process's memory for one configuration, from an emptied allocator."""
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    lat = size // 8
    x = torch.randn(batch, 4, lat, lat, device="cuda", dtype=torch.float16)
    noise = torch.randn_like(x)
    ctx = torch.randn(batch, 77, 768, device="cuda", dtype=torch.float16)
    t = torch.randint(0, 1000, (batch,), device="cuda")
    scaler = torch.amp.GradScaler("cuda")

    def step():
        for _ in range(accum):
            with torch.autocast("cuda", dtype=torch.float16):
                pred = unet(x, t, ctx).sample
            loss = F.mse_loss(pred.float(), noise.float()) / accum
            scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    ms = []
    for _ in range(steps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        step()
        b.record()
        b.synchronize()
        ms.append(a.elapsed_time(b))
    ms.sort()
    used = used_bytes()
    del x, noise, ctx, t
    return dict(ms_image=round(ms[len(ms) // 2] / (batch * accum), 2), used=used,
                max_allocated_MiB=round(torch.cuda.max_memory_allocated() / MIB),
                max_reserved_MiB=round(torch.cuda.max_memory_reserved() / MIB))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="512,768")
    ap.add_argument("--cards", default="6G,8G,12G,16G,24G")
    ap.add_argument("--budget", type=float, default=150, help="seconds for the whole script, past which no new "
                                                                 "configuration starts")
    ap.add_argument("--steps", type=int, default=4, help="timed steps per configuration")
    ap.add_argument("--warmup", type=int, default=1)
    a = ap.parse_args()
    start = time.time()
    sizes = [int(s) for s in a.sizes.split(",")]
    cards = [(c, size_bytes(c)) for c in a.cards.split(",")]
    idle = smi_used_mib()  # before this process has a CUDA context
    torch.cuda.init()
    try:
        import bitsandbytes as bnb
        optimizer = "bnb"
        opt_name = f"bitsandbytes {bnb.__version__} AdamW8bit"
    except Exception as e:  # ImportError, or its CUDA library not loading
        optimizer = "torch"
        opt_name = f"torch fused AdamW (bitsandbytes did not import: {repr(e)[:120]})"
    log(kind="env", torch=torch.__version__, gpu=torch.cuda.get_device_name(), optimizer=opt_name,
        idle_MiB=idle, context="cudaMemGetInfo in use less nvidia-smi before the context" if idle is not None
        else "cudaMemGetInfo in use (nvidia-smi silent: the device's own use counted)")
    unet, opt = build(optimizer)

    def process_mib(used):
        return round(used / MIB - (idle or 0))

    preset, sweep = {}, {}
    for size in sizes:
        r = measure(unet, opt, size, 1, 8, max(2, a.steps // 2), 1)
        r["process_MiB"] = process_mib(r.pop("used"))
        preset[size] = r
        log(kind="preset", size=size, batch=1, accumulation=8, gradient_checkpointing=True, fp16=True, **r)
    largest_card = max(b for _, b in cards)
    for size in sizes:
        sweep[size] = []
        for batch in SWEEP:
            if time.time() - start > a.budget:
                log(kind="sweep", size=size, batch=batch, stopped=f"past --budget {a.budget} s")
                break
            try:
                r = measure(unet, opt, size, batch, 1, a.steps, a.warmup)
            except torch.OutOfMemoryError:
                torch.cuda.empty_cache()
                log(kind="sweep", size=size, batch=batch, error="out of memory")
                break
            r["process_MiB"] = process_mib(r.pop("used"))
            sweep[size].append((batch, r))
            log(kind="sweep", size=size, batch=batch, **r)
            if r["process_MiB"] * MIB > largest_card:
                break

    print(f"\nPyTorch (kohya's 8 GB preset recipe: fp16 + GradScaler, gradient checkpointing, {opt_name}, "
          "LoRA rank 16, TE outputs cached); process memory, CUDA context included\n")
    print("| size | batch x accumulation | ms/image | process MiB | max allocated MiB | max reserved MiB |")
    print("|---|---|---|---|---|---|")
    for size, r in preset.items():
        print(f"| {size}² | 1 x 8 | {r['ms_image']} | {r['process_MiB']} | {r['max_allocated_MiB']} | "
              f"{r['max_reserved_MiB']} |")
    for size, rows in sweep.items():
        for batch, r in rows:
            print(f"| {size}² | {batch} x 1 | {r['ms_image']} | {r['process_MiB']} | {r['max_allocated_MiB']} | "
                  f"{r['max_reserved_MiB']} |")
    print("\n| card | size | largest swept batch that fits (no accumulation) | process MiB | ms/image |")
    print("|---|---|---|---|---|")
    for name, limit in cards:
        for size, rows in sweep.items():
            fit = [(b, r) for b, r in rows if r["process_MiB"] * MIB <= limit]
            if fit:
                b, r = fit[-1]
                print(f"| {name} | {size}² | {b} | {r['process_MiB']} | {r['ms_image']} |")
            else:
                print(f"| {name} | {size}² | none of the sweep | | |")
    print(f"\n({time.time() - start:.0f} s in all)")
    with open(os.path.join(OUT, "presets_torch.json"), "w") as f:
        json.dump(records, f, indent=1)


if __name__ == "__main__":
    main()
