#!/usr/bin/env python3
"""The PyTorch side of the presets table (bench/presets_round.sh runs it after bench_presets).

The SD1.5 UNet (diffusers, random weights) frozen, LoRA rank 16 (peft) on kohya's default targets
with fp32 masters, SDPA attention (diffusers' default on torch 2), gradient checkpointing,
bitsandbytes AdamW8bit (torch's fused AdamW when bitsandbytes does not import: said in the output),
text-encoder outputs cached (a random context). Two kinds of configuration:
  kohya   the seed's 8 GB kohya preset: fp16 frozen weights, fp16 autocast with GradScaler,
          batch 1 x 8 accumulation (an optimizer step every 8 micro-batches), per --kohya-sizes;
  batch   bf16 frozen weights and bf16 autocast, no accumulation, at the batches bench_presets'
          table picked (--ours TSV: its rows without accumulation at --size) or --batches.
Memory is the process's peak, CUDA context included: torch.cuda.max_memory_reserved plus what the
process holds outside the caching allocator (nvidia-smi's memory.used after the steps, less its
figure before this process made its context, less torch's reserved bytes then: the context, the
kernel modules loaded so far, library handles); max_memory_allocated beside it. The allocator is
emptied between configurations. Times: CUDA events around whole optimizer steps, the median after
warm-up, per image. With --ours, a side-by-side table against bench_presets' measured rows.
Prints JSON lines and markdown tables; writes $OUT/presets_torch.json.
--tiny --device cpu runs a small UNet on the CPU (a check of this script, no figures).
Usage: python3 bench/presets_torch.py [--ours presets.tsv] [--size 512] [--batches 8,16]
       [--kohya-sizes 512,768] [--steps 4] [--warmup 1] [--budget 240]
Needs diffusers and peft importable, bitsandbytes optionally (PYTHONPATH).
"""
import argparse
import csv
import json
import os
import subprocess
import time

import torch
import torch.nn.functional as F

OUT = os.environ.get("OUT", "/tmp")
# The SD1.5 UNet (runwayml/stable-diffusion-v1-5 unet/config.json, as shared/anchors/torch_sd15_lora.py
# builds it) and kohya's LoRA targets for it.
SD15 = dict(sample_size=64, in_channels=4, out_channels=4, center_input_sample=False, flip_sin_to_cos=True,
            freq_shift=0, down_block_types=("CrossAttnDownBlock2D",) * 3 + ("DownBlock2D",),
            up_block_types=("UpBlock2D",) + ("CrossAttnUpBlock2D",) * 3, block_out_channels=(320, 640, 1280, 1280),
            layers_per_block=2, downsample_padding=1, mid_block_scale_factor=1, act_fn="silu", norm_num_groups=32,
            norm_eps=1e-5, cross_attention_dim=768, attention_head_dim=8)
TINY = dict(SD15, block_out_channels=(32, 64), layers_per_block=1, norm_num_groups=8, cross_attention_dim=32,
            down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"))
KOHYA_TARGETS = ["to_q", "to_k", "to_v", "to_out.0", "proj_in", "proj_out", "ff.net.0.proj", "ff.net.2"]
MIB = 2 ** 20
records = []


def log(**rec):
    print(json.dumps(rec), flush=True)
    records.append(rec)


def smi_used_mib():
    """nvidia-smi's memory.used of the first visible device (MiB), None when it does not answer."""
    dev = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0]
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", dev],
                             capture_output=True, text=True, timeout=20).stdout
        return float(out.split()[0])
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None


def make_optimizer(params, which):
    if which == "bnb":
        import bitsandbytes as bnb
        return bnb.optim.AdamW8bit(params, lr=1e-4)
    return torch.optim.AdamW(params, lr=1e-4, fused=torch.cuda.is_available())


def build(config, device):
    from diffusers import UNet2DConditionModel
    from peft import LoraConfig
    with torch.device(device):
        unet = UNet2DConditionModel(**config)
    unet.requires_grad_(False)
    unet.add_adapter(LoraConfig(r=16, lora_alpha=16, init_lora_weights="gaussian", target_modules=KOHYA_TARGETS))
    for p in unet.parameters():
        if p.requires_grad:
            p.data = p.data.float()  # fp32 masters: GradScaler unscales fp32 gradients only
    unet.enable_gradient_checkpointing()
    unet.train()
    return unet


def frozen_to(unet, dtype):
    """The frozen weights in dtype (kohya casts the UNet to the mixed-precision dtype); LoRA stays fp32."""
    for p in unet.parameters():
        if not p.requires_grad:
            p.data = p.data.to(dtype)


class Memory:
    """The process's device memory, from nvidia-smi's figure before the context (None: CPU or no answer)."""

    def __init__(self, device):
        self.cuda = device == "cuda"
        self.idle = smi_used_mib() if self.cuda else None  # before this process has a CUDA context

    def reset(self):
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()

    def read(self):
        if not self.cuda:
            return {}
        torch.cuda.synchronize()
        r = dict(max_allocated_MiB=round(torch.cuda.max_memory_allocated() / MIB),
                 max_reserved_MiB=round(torch.cuda.max_memory_reserved() / MIB))
        now = smi_used_mib()
        if now is not None and self.idle is not None:
            outside = now - self.idle - torch.cuda.memory_reserved() / MIB
            r.update(outside_allocator_MiB=round(outside), process_peak_MiB=round(r["max_reserved_MiB"] + outside))
        return r


def measure(unet, mem, device, optimizer, size, batch, accum, dtype, steps, warmup):
    """ms per image and the process's peak memory for one configuration, from an emptied allocator."""
    mem.reset()
    params = [p for p in unet.parameters() if p.requires_grad]
    opt = make_optimizer(params, optimizer)
    g = torch.Generator(device=device).manual_seed(0)
    lat = size // 8
    x = torch.randn(batch, 4, lat, lat, device=device, generator=g, dtype=dtype)
    noise = torch.randn(x.shape, device=device, generator=g, dtype=dtype)
    ctx = torch.randn(batch, 77, unet.config.cross_attention_dim, device=device, generator=g, dtype=dtype)
    t = torch.randint(0, 1000, (batch,), device=device, generator=g)
    scaler = torch.amp.GradScaler(device, enabled=dtype == torch.float16)

    def step():
        for _ in range(accum):
            with torch.autocast(device, dtype=dtype):
                pred = unet(x + noise, t, ctx).sample
            loss = F.mse_loss(pred.float(), noise.float()) / accum
            scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)

    try:
        for _ in range(warmup):
            step()
        ms = []
        for _ in range(steps):
            if device == "cuda":
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                step()
                b.record()
                b.synchronize()
                ms.append(a.elapsed_time(b))
            else:
                a = time.perf_counter()
                step()
                ms.append(1e3 * (time.perf_counter() - a))
        ms.sort()
        r = dict(ms_image=round(ms[len(ms) // 2] / (batch * accum), 3), **mem.read())
    except torch.OutOfMemoryError:
        r = dict(error="out of memory")
    del opt, x, noise, ctx, t
    unet.zero_grad(set_to_none=True)
    return r


def read_ours(path, size):
    """bench_presets' TSV rows at `size`: the fitted rows (no accumulation) and kohya's preset rows."""
    with open(path, newline="") as f:
        rows = [r for r in csv.DictReader(f, delimiter="\t") if r["size"] == str(size) and r["batch"] != "0"]
    return rows


def ints(text):
    return [int(v) for v in text.split(",") if v.strip()]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ours", help="bench_presets --out TSV: the batches to run, and the side-by-side table")
    ap.add_argument("--size", type=int, default=512, help="image side of the batch configurations")
    ap.add_argument("--batches", default="", help="batches to run (default: the TSV's at --size, else 8)")
    ap.add_argument("--kohya-sizes", default="512", help="image sides of kohya's preset ('' for none)")
    ap.add_argument("--budget", type=float, default=240, help="seconds past which no new configuration starts")
    ap.add_argument("--steps", type=int, default=4, help="timed optimizer steps per configuration")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--tiny", action="store_true", help="a small UNet (a check of the script on the CPU)")
    a = ap.parse_args()
    start = time.time()
    ours = read_ours(a.ours, a.size) if a.ours else []
    batches = ints(a.batches) or sorted({int(r["batch"]) for r in ours if r["grad_accum"] == "1"}) or [8]
    mem = Memory(a.device)  # before anything touches the device
    try:
        import bitsandbytes as bnb
        optimizer, opt_name = "bnb", f"bitsandbytes {bnb.__version__} AdamW8bit"
        if a.device != "cuda":
            raise ImportError("bitsandbytes needs CUDA here")
    except Exception as e:  # ImportError, or its CUDA library not loading
        optimizer = "torch"
        opt_name = f"torch {'fused ' if a.device == 'cuda' else ''}AdamW (bitsandbytes not used: {repr(e)[:160]})"
    log(kind="env", torch=torch.__version__, diffusers=__import__("diffusers").__version__,
        peft=__import__("peft").__version__, device=torch.cuda.get_device_name() if a.device == "cuda" else "cpu",
        optimizer=opt_name, idle_MiB=mem.idle, sdpa=hasattr(F, "scaled_dot_product_attention"))
    unet = build(TINY if a.tiny else SD15, a.device)

    results = []  # (kind, size, batch, accum, record)
    plan = [("kohya", s, 1, 8, torch.float16) for s in ints(a.kohya_sizes)]
    plan += [("batch", a.size, b, 1, torch.bfloat16) for b in batches]
    for kind, size, batch, accum, dtype in plan:
        if time.time() - start > a.budget:
            log(kind=kind, size=size, batch=batch, accumulation=accum, stopped=f"past --budget {a.budget} s")
            continue
        frozen_to(unet, dtype)
        steps = max(2, a.steps // 2) if accum > 1 else a.steps
        r = measure(unet, mem, a.device, optimizer, size, batch, accum, dtype, steps, a.warmup)
        log(kind=kind, size=size, batch=batch, accumulation=accum, dtype=str(dtype).removeprefix("torch."),
            gradient_checkpointing=True, **r)
        results.append((kind, size, batch, accum, r))

    print(f"\nPyTorch: diffusers UNet + peft LoRA rank 16, SDPA, gradient checkpointing, {opt_name}, text-encoder "
          "outputs cached; peak = max reserved + what the process holds outside the allocator (CUDA context)\n")
    print("| preset | size | batch x accumulation | autocast | ms/image | peak MiB (context included) "
          "| max reserved MiB | max allocated MiB |")
    print("|---|---|---|---|---|---|---|---|")
    for kind, size, batch, accum, r in results:
        label = "kohya 8 GB (fp16 + GradScaler)" if kind == "kohya" else "batch"
        print(f"| {label} | {size}² | {batch} x {accum} | {'fp16' if kind == 'kohya' else 'bf16'} | "
              f"{r.get('ms_image', r.get('error', ''))} | {r.get('process_peak_MiB', '-')} | "
              f"{r.get('max_reserved_MiB', '-')} | {r.get('max_allocated_MiB', '-')} |")
    if ours:
        side_by_side(ours, results)
    print(f"\n({time.time() - start:.0f} s in all)")
    with open(os.path.join(OUT, "presets_torch.json"), "w") as f:
        json.dump(records, f, indent=1)


def side_by_side(ours, results):
    """bench_presets' measured rows beside PyTorch's at the same batch and accumulation."""
    torch_at = {(kind == "kohya", size, batch, accum): r for kind, size, batch, accum, r in results}
    print("\n| card | size | batch x accumulation | ours: recompute, peak MiB, ms/image "
          "| PyTorch (gradient checkpointing): peak MiB, ms/image | PyTorch / ours ms/image | PyTorch / ours peak |")
    print("|---|---|---|---|---|---|---|")
    for row in ours:
        kohya = row["optimizer"] == "AdamW8bit" and row["grad_accum"] == "8"
        key = (kohya, int(row["size"]), int(row["batch"]), int(row["grad_accum"]))
        t = torch_at.get(key, {})
        mine_ms = float(row["ms_image"]) if row["ms_image"] else None
        mine_mib = int(row["measured_bytes"]) / MIB if row["measured_bytes"] else None
        t_ms, t_mib = t.get("ms_image"), t.get("process_peak_MiB")
        ratio_ms = f"{t_ms / mine_ms:.2f}" if t_ms and mine_ms else ""
        ratio_mem = f"{t_mib / mine_mib:.2f}" if t_mib and mine_mib else ""
        card_bytes = int(row["card_bytes"])
        card = f"{card_bytes / 2 ** 30:g} GiB" if card_bytes >= 2 ** 30 else f"{card_bytes / MIB:g} MiB"
        mine = f"{row['recompute']}, {f'{mine_mib:.0f}' if mine_mib else '-'}, {row['ms_image'] or '-'}"
        theirs = f"{t_mib if t_mib is not None else '-'}, {t_ms if t_ms is not None else t.get('error', 'not run')}"
        print(f"| {card} | {row['size']}² | {row['batch']} x {row['grad_accum']} | {mine} | {theirs} | {ratio_ms} "
              f"| {ratio_mem} |")


if __name__ == "__main__":
    main()
