#!/usr/bin/env python3
"""diffusers' side of the text-to-image comparison (bench/txt2img_round.sh runs both sides).

The model is a diffusers folder such as tests/golden/make_fullsize.py writes (unet/, text_encoder/,
vae/, tokenizer/); the pipeline is StableDiffusionPipeline built from those parts with SD1.5's
scheduler configuration (the sampler's diffusers class made from it, as bench_txt2img's default
preset does).

  reference  --out REF.safetensors: one request (prompt, negative prompt, 512 x 512, a few Euler
             steps with CFG) from injected unit noise, in fp32 (TF32 off) and in bf16 (the models
             cast, SDPA): the noise (NHWC), both images in [0, 1] (NHWC) and, as metadata, the
             request and diffusers' own bf16 spread (||bf16 - fp32|| / ||fp32||). bench_txt2img
             --check compares ours in bf16 against the fp32 image with 3x that spread.
  bench      seconds per image and UNet iterations per second of diffusers in bf16 (SDPA
             attention), eager and, with --compile, with the UNet and VAE decoder under
             torch.compile (the compile time is reported; --compile-budget bounds it): 512 x 512,
             20 Euler steps, CFG 7.5 (UNet batch 2), the VAE decode included; one JSON line each.
"""
import argparse
import json
import os
import pathlib
import sys
import time

import torch

SD15_SCHEDULER_CONFIG = {
    "_class_name": "PNDMScheduler", "beta_end": 0.012, "beta_schedule": "scaled_linear", "beta_start": 0.00085,
    "num_train_timesteps": 1000, "set_alpha_to_one": False, "skip_prk_steps": True, "steps_offset": 1,
    "trained_betas": None, "clip_sample": False,
}
PROMPT = "a photograph of an astronaut riding a horse on the moon, detailed, 8k"
NEGATIVE = "blurry, lowres, watermark"


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def load_pipeline(folder, dtype, device, sampler="euler"):
    from diffusers import (AutoencoderKL, DDIMScheduler, DPMSolverMultistepScheduler, EulerAncestralDiscreteScheduler,
                           EulerDiscreteScheduler, StableDiffusionPipeline, UNet2DConditionModel)
    from transformers import CLIPTextModel, CLIPTokenizer
    root = pathlib.Path(folder)
    classes = {"euler": EulerDiscreteScheduler, "euler_a": EulerAncestralDiscreteScheduler, "ddim": DDIMScheduler,
               "dpmsolver++": DPMSolverMultistepScheduler}
    tok = CLIPTokenizer.from_pretrained(str(root / "tokenizer"))
    tok.model_max_length = 77
    pipe = StableDiffusionPipeline(
        vae=AutoencoderKL.from_pretrained(str(root / "vae"), torch_dtype=dtype),
        text_encoder=CLIPTextModel.from_pretrained(str(root / "text_encoder"), torch_dtype=dtype),
        tokenizer=tok, unet=UNet2DConditionModel.from_pretrained(str(root / "unet"), torch_dtype=dtype),
        scheduler=classes[sampler].from_config(SD15_SCHEDULER_CONFIG), safety_checker=None, feature_extractor=None,
        requires_safety_checker=False)
    pipe.set_progress_bar_config(disable=True)
    return pipe.to(device)


def reference(args):
    from safetensors.torch import save_file
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    gen = torch.Generator().manual_seed(1234)
    h = w = args.size
    noise, images = None, {}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        pipe = load_pipeline(args.model, dtype, args.device)
        if noise is None:
            f = pipe.vae_scale_factor
            noise = torch.randn((1, pipe.unet.config.in_channels, h // f, w // f), generator=gen, dtype=torch.float32)
        with torch.no_grad():
            out = pipe(prompt=PROMPT, negative_prompt=NEGATIVE, height=h, width=w, num_inference_steps=args.steps,
                       guidance_scale=args.cfg, latents=noise.to(args.device, dtype), output_type="np").images
        images[name] = torch.from_numpy(out).float().contiguous()
        del pipe
        if args.device == "cuda":
            torch.cuda.empty_cache()
    ref, bf = images["fp32"], images["bf16"]
    spread = float((bf - ref).norm() / ref.norm())
    log(f"diffusers bf16 vs fp32: rel {spread:.3e}, max abs {float((bf - ref).abs().max()):.3e}")
    meta = dict(prompt=PROMPT, negative=NEGATIVE, width=w, height=h, steps=args.steps, cfg=args.cfg, sampler="euler",
                spread=spread)
    save_file({"noise": noise.permute(0, 2, 3, 1).contiguous(), "image_fp32": ref, "image_bf16": bf}, args.out,
              metadata={"request": json.dumps(meta)})
    log(f"wrote {args.out}")


def time_pipeline(pipe, args, label, runs, extra=None):
    """Median seconds per image and UNet it/s over `runs` generations (after the caller's warm-up)."""
    stamps = []

    def on_step(p, i, t, kw):
        torch.cuda.synchronize()
        stamps.append(time.perf_counter())
        return kw

    totals, rates = [], []
    for _ in range(runs):
        stamps.clear()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.no_grad():
            pipe(prompt=PROMPT, negative_prompt=NEGATIVE, height=args.size, width=args.size,
                 num_inference_steps=args.steps, guidance_scale=args.cfg, output_type="pil",
                 callback_on_step_end=on_step)
        torch.cuda.synchronize()
        totals.append(time.perf_counter() - t0)
        rates.append((len(stamps) - 1) / (stamps[-1] - stamps[0]))
    totals.sort()
    rates.sort()
    result = dict(side=label, size=args.size, steps=args.steps, cfg=args.cfg, batch=1,
                  seconds_per_image=round(totals[len(totals) // 2], 4), unet_it_s=round(rates[len(rates) // 2], 2),
                  gpu=torch.cuda.get_device_name(), torch=torch.__version__, **(extra or {}))
    print(json.dumps(result), flush=True)
    return result


def bench(args):
    pipe = load_pipeline(args.model, torch.bfloat16, args.device)
    log("diffusers eager (bf16, SDPA): warm-up")
    for _ in range(2):
        with torch.no_grad():
            pipe(prompt=PROMPT, height=args.size, width=args.size, num_inference_steps=3, output_type="pil")
    time_pipeline(pipe, args, "diffusers eager bf16 sdpa", args.runs)
    if not args.compile:
        return
    log(f"torch.compile (mode {args.compile_mode}) of the UNet and the VAE decoder; budget {args.compile_budget} s")
    pipe.unet = torch.compile(pipe.unet, mode=args.compile_mode, fullgraph=True)
    pipe.vae.decode = torch.compile(pipe.vae.decode, mode=args.compile_mode, fullgraph=True)
    t0 = time.perf_counter()
    try:
        for _ in range(3):  # compiles on the first calls; reduce-overhead records its CUDA graphs after warm-up
            with torch.no_grad():
                pipe(prompt=PROMPT, negative_prompt=NEGATIVE, height=args.size, width=args.size,
                     num_inference_steps=args.steps, guidance_scale=args.cfg, output_type="pil")
            if time.perf_counter() - t0 > args.compile_budget:
                raise TimeoutError(f"compilation and warm-up took over {args.compile_budget} s")
    except Exception as e:  # noqa: BLE001  (a failed compile is a result to report, not a crash)
        print(json.dumps(dict(side="diffusers torch.compile", error=f"{type(e).__name__}: {e}"[:400])), flush=True)
        return
    compile_s = round(time.perf_counter() - t0, 1)
    log(f"compiled and warmed up in {compile_s} s")
    time_pipeline(pipe, args, f"diffusers torch.compile {args.compile_mode} bf16", args.runs,
                  dict(compile_and_warmup_s=compile_s))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["reference", "bench"])
    ap.add_argument("--model", required=True, help="diffusers folder (make_fullsize.py --out DIR: DIR/diffusers)")
    ap.add_argument("--out", help="reference: the safetensors file to write")
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--steps", type=int, default=None, help="default: 8 (reference), 20 (bench)")
    ap.add_argument("--cfg", type=float, default=None, help="default: 5 (reference), 7.5 (bench)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--device", default="cuda", help="cuda, or cpu to try the flow on a tiny model")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--compile-mode", default="reduce-overhead",
                    help="torch.compile mode (reduce-overhead: inductor kernels replayed as CUDA graphs, as ours)")
    ap.add_argument("--compile-budget", type=float, default=900)
    args = ap.parse_args()
    if args.steps is None:
        args.steps = 8 if args.mode == "reference" else 20
    if args.cfg is None:
        args.cfg = 5.0 if args.mode == "reference" else 7.5
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.mode == "reference":
        if not args.out:
            ap.error("reference needs --out")
        reference(args)
    else:
        bench(args)


if __name__ == "__main__":
    main()
