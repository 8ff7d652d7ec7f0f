#!/usr/bin/env python3
"""The full-size SD1.5 check (tools/sd15check.cpp): the model in both layouts and diffusers' outputs.

Builds SD1.5's three models with the libraries users run (diffusers' UNet2DConditionModel and
AutoencoderKL, transformers' CLIPTextModel) at SD1.5's configs, with seeded random weights, and
writes to --out:
  diffusers/                the model as a diffusers folder: model_index.json; unet/, text_encoder/,
                            vae/ written by the libraries' own save_pretrained (config.json +
                            safetensors); tokenizer/ (vocab.json, merges.txt) built the way CLIP
                            builds it from models/sd15/data/clip_merges.txt (the device has no internet)
  sd15.safetensors          the same tensors as an original single file: model.diffusion_model.*,
                            cond_stage_model.transformer.text_model.* (with the position_ids buffer
                            such files carry), first_stage_model.*; the key maps are the tiny golden
                            scripts' (make_unet_golden, make_vae_golden), each checked here against
                            diffusers' own single-file converter on the full-size tensors
  reference.safetensors     inputs and diffusers' fp32 outputs, feature maps NHWC as the C++ side uses:
      unet.x [2,64,64,4], unet.t [2], unet.context [2,77,768] -> unet.eps [2,64,64,4]
      clip.ids [4,77] i32 (transformers' CLIPTokenizer on the captions) -> clip.last, clip.skip2
          [4,77,768] (last_hidden_state; hidden_states[-2] + final_layer_norm, kohya's clip_skip 2)
      vae.x [2,256,256,3] -> vae.moments [2,32,32,8] (quant_conv's output: mean, logvar)
      vae.z [1,64,64,4] (scaled latent) -> vae.image [1,512,512,3] = decode(z / scaling_factor)
    metadata (JSON strings): captions; spread: per output, how far diffusers itself lands from its
    fp32 output in bf16 (under torch.autocast, and with the model cast to bf16 as ours runs), as
    rel = ||x - ref|| / ||ref|| and max_abs: the tool sets its bf16 tolerance from it; models;
    single_file_configs (--tiny only: the tiny models are no SD1.5, so their single file is opened
    with these configs; a full-size single file is opened as SD1.5, as users' files are).

Weights are fp16 in both layouts: SD1.5 is distributed so (the diffusers fp16 variant, most single
files), it halves the bytes written and read, and every weight is rounded to fp16 *before* the
references run, so the files hold exactly the weights diffusers computed with. Random values: the
tiny golden scripts' scheme (weights uniform with variance 1 / fan_in, norm gains 1 +- 0.2, biases
+- 0.1, CLIP's embeddings std 0.5) rather than the libraries' inits, which leave every norm at 1 / 0:
there a norm loaded into the wrong layer would not change any output. The run checks that every
output is finite and not degenerate (it varies over batch and space) and fails otherwise.

References run in fp32 with TF32 off (cuBLAS and cuDNN), on CUDA for the full size.
  device:  python3 tests/golden/make_fullsize.py --out /tmp/sd15full          (about a minute on an H200)
  here:    /work/venv-golden/bin/python tests/golden/make_fullsize.py --tiny --out /tmp/sd15tiny
--tiny runs the same flow on CPU with the golden scripts' tiny configs made into one pipeline (the
UNet's cross-attention as wide as the tiny text encoder, CLIP's real 49408-token vocabulary) and
small inputs.
"""
import argparse
import contextlib
import json
import os
import pathlib
import shutil
import sys
import time

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_clip_golden  # noqa: E402  (the tiny CLIP config, encode with clip_skip)
import make_tokenizer_golden as tokgold  # noqa: E402  (CLIP's vocab.json from merges)
import make_unet_golden  # noqa: E402  (UNet LDM key map, checked against diffusers' converter)
import make_vae_golden  # noqa: E402  (VAE LDM key map, likewise)

SF = 0.18215
SEED = 20241130

# SD1.5's unet/, text_encoder/ and vae/ config.json (runwayml/stable-diffusion-v1-5), the fields
# that are not the classes' defaults written out anyway so the file says what it is.
UNET_SD15 = dict(
    sample_size=64, in_channels=4, out_channels=4, center_input_sample=False, flip_sin_to_cos=True, freq_shift=0,
    down_block_types=("CrossAttnDownBlock2D",) * 3 + ("DownBlock2D",),
    up_block_types=("UpBlock2D",) + ("CrossAttnUpBlock2D",) * 3,
    block_out_channels=(320, 640, 1280, 1280), layers_per_block=2, downsample_padding=1, mid_block_scale_factor=1,
    act_fn="silu", norm_num_groups=32, norm_eps=1e-5, cross_attention_dim=768, attention_head_dim=8)
CLIP_SD15 = dict(
    vocab_size=49408, hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
    max_position_embeddings=77, hidden_act="quick_gelu", layer_norm_eps=1e-5, projection_dim=768,
    bos_token_id=0, eos_token_id=2, pad_token_id=1)
VAE_SD15 = dict(
    in_channels=3, out_channels=3, latent_channels=4, down_block_types=("DownEncoderBlock2D",) * 4,
    up_block_types=("UpDecoderBlock2D",) * 4, block_out_channels=(128, 256, 512, 512), layers_per_block=2,
    act_fn="silu", norm_num_groups=32, sample_size=512, scaling_factor=SF)

# --tiny: the golden scripts' configs, made into one pipeline.
UNET_TINY = dict(make_unet_golden.CONFIG, cross_attention_dim=make_clip_golden.CONFIG["hidden_size"])
CLIP_TINY = dict(make_clip_golden.CONFIG, vocab_size=49408, bos_token_id=0, eos_token_id=2, pad_token_id=1)
VAE_TINY = dict(
    in_channels=3, out_channels=3, latent_channels=4, down_block_types=("DownEncoderBlock2D",) * 2,
    up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(8, 16), layers_per_block=1, norm_num_groups=4,
    sample_size=16, scaling_factor=SF)

# Input sizes: UNet latent side, VAE encoder image side, VAE decoder latent side.
SIZES = {"full": dict(unet=64, vae_enc=256, vae_dec=64), "tiny": dict(unet=8, vae_enc=16, vae_dec=8)}
TIMESTEPS = [37.0, 812.5]  # one fractional, as samplers produce
CAPTIONS = [
    "a photo of a cat sitting on a windowsill, soft morning light",
    "An astronaut riding a horse on Mars, artstation, hd, dramatic lighting, detailed",
    "1girl, solo, (masterpiece:1.2), best quality, looking at viewer, cherry blossoms, school uniform",
    # longer than 75 tokens: truncated to BOS + 75 + EOS as SD1.5 pipelines do
    "portrait of an old fisherman with a weathered face and a thick grey beard, wearing a yellow raincoat, "
    "standing on a wooden pier at dusk, stormy sea behind him, seagulls circling overhead, oil painting in the "
    "style of the dutch golden age, rich textures, dramatic chiaroscuro, highly detailed, museum quality, 8k",
]


def log(msg, t0=None):
    print(msg + (f" ({time.perf_counter() - t0:.1f} s)" if t0 is not None else ""), flush=True)


def randomize(model, gen, device):
    """Every parameter drawn again (see the module docstring), rounded to fp16-representable values."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            u = torch.rand(p.shape, generator=gen, device=device) * 2 - 1
            if p.dim() == 1 and "norm" in name and name.endswith(".weight"):
                v = 1 + 0.2 * u
            elif p.dim() == 1:
                v = 0.1 * u
            elif "embedding" in name and p.dim() == 2 and "time" not in name:
                v = u * 0.5 * 3 ** 0.5  # CLIP's token / position tables: std 0.5
            else:
                v = u * (3.0 / p[0].numel()) ** 0.5  # uniform with variance 1 / fan_in
            p.copy_(v.half().to(p.dtype))


def fp16_state(model):
    return {k: v.detach().to("cpu", torch.float16).contiguous() for k, v in model.state_dict().items()}


def save_folder(root, unet, clip, vae, merges):
    """The diffusers layout, each model saved by its library in fp16 (exact: the values are fp16)."""
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    for sub, model in (("unet", unet), ("text_encoder", clip), ("vae", vae)):
        model.half()
        model.save_pretrained(str(root / sub), safe_serialization=True)
        model.float()
    tokgold.write_folder(root / "tokenizer", merges)
    index = {"_class_name": "StableDiffusionPipeline", "_diffusers_version": __import__("diffusers").__version__,
             "feature_extractor": [None, None], "requires_safety_checker": False, "safety_checker": [None, None],
             "scheduler": [None, None], "text_encoder": ["transformers", "CLIPTextModel"],
             "tokenizer": ["transformers", "CLIPTokenizer"], "unet": ["diffusers", "UNet2DConditionModel"],
             "vae": ["diffusers", "AutoencoderKL"]}
    (root / "model_index.json").write_text(json.dumps(index, indent=2) + "\n")
    names = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    return names, size


def single_file_tensors(unet, clip, vae):
    """The original single-file dict; each key map checked against diffusers' converter."""
    usd = fp16_state(unet)
    out = make_unet_golden.check_original_map(unet, usd)
    vsd = fp16_state(vae)
    levels = len(vae.config.block_out_channels)
    make_vae_golden.check_against_diffusers_converter(vae, vsd, levels)
    out.update(make_vae_golden.to_original(vsd, levels))
    for k, v in fp16_state(clip).items():
        if not k.endswith("position_ids"):
            out["cond_stage_model.transformer." + ("" if k.startswith("text_model.") else "text_model.") + k] = v
    max_pos = clip.config.max_position_embeddings
    out["cond_stage_model.transformer.text_model.embeddings.position_ids"] = torch.arange(max_pos).unsqueeze(0)
    return {k: v.contiguous() for k, v in out.items()}


def nhwc(a):
    return a.detach().permute(0, 2, 3, 1).float().cpu().contiguous()


def run_models(unet, clip, vae, inp, mode):
    """Outputs of the three models on the inputs; mode: fp32 | autocast_bf16 | bf16 (models cast to bf16:
    weights and activations bf16, as ggml-lite's bf16 graphs run). NCHW / [N, L, D] float32 on the host."""
    dev = inp["unet.x"].device
    cast = (lambda a: a.bfloat16()) if mode == "bf16" else (lambda a: a)
    if mode == "bf16":
        for m in (unet, clip, vae):
            m.to(torch.bfloat16)
    ctx = torch.autocast(dev.type, dtype=torch.bfloat16) if mode == "autocast_bf16" else contextlib.nullcontext()
    out = {}
    with torch.no_grad(), ctx:
        out["unet.eps"] = unet(cast(inp["unet.x"]), inp["unet.t"], encoder_hidden_states=cast(inp["unet.context"])).sample
        out["clip.last"] = make_clip_golden.encode(clip, inp["clip.ids"], 1)
        out["clip.skip2"] = make_clip_golden.encode(clip, inp["clip.ids"], 2)
        out["vae.moments"] = vae.quant_conv(vae.encoder(cast(inp["vae.x"])))
        out["vae.image"] = vae.decode(cast(inp["vae.z"]) / SF).sample
    if dev.type == "cuda":
        torch.cuda.synchronize()
    return {k: v.float().cpu() for k, v in out.items()}


def make_inputs(gen, sizes, clip_cfg, tokenizer, device):
    s = sizes
    inp = {
        "unet.x": torch.randn(2, 4, s["unet"], s["unet"], generator=gen),
        "unet.t": torch.tensor(TIMESTEPS),
        "unet.context": torch.randn(2, clip_cfg["max_position_embeddings"], clip_cfg["hidden_size"], generator=gen),
        # An image-like input (smooth, in [-1, 1]) rather than pixel noise, so the VAE's attention
        # sees structure.
        "vae.x": (F.interpolate(torch.rand(2, 3, 16, 16, generator=gen) * 2 - 1, size=s["vae_enc"], mode="bilinear",
                                align_corners=False) + 0.05 * torch.randn(2, 3, s["vae_enc"], s["vae_enc"], generator=gen)
                  ).clamp(-1, 1),
        "vae.z": torch.randn(1, 4, s["vae_dec"], s["vae_dec"], generator=gen),  # scaled latents have std ~1
    }
    ids = [tokenizer(c, padding="max_length", max_length=77, truncation=True).input_ids for c in CAPTIONS]
    inp["clip.ids"] = torch.tensor(ids, dtype=torch.long)
    assert inp["clip.ids"].shape == (len(CAPTIONS), 77) and inp["clip.ids"][3, -1].item() == tokenizer.eos_token_id
    return {k: v.to(device) for k, v in inp.items()}


def rel(a, ref):
    return ((a.double() - ref.double()).norm() / ref.double().norm()).item()


def check_sane(name, out):
    """Finite, not degenerate: varies across the batch and in space, no constant output."""
    x = out.double()
    if not torch.isfinite(x).all():
        raise SystemExit(f"{name}: non-finite values in diffusers' output; the random weights are too large")
    std, mx = x.std().item(), x.abs().max().item()
    if not std > 1e-3 * max(mx, 1e-30) or std < 1e-4:
        raise SystemExit(f"{name}: degenerate output (std {std:.3e}, max |x| {mx:.3e})")
    if x.shape[0] > 1:
        spread = rel(x[1], x[0])
        if spread < 0.05:
            raise SystemExit(f"{name}: the batch items give nearly the same output (rel. diff {spread:.3e})")
    spatial = x.flatten(2).std(dim=2).mean().item() if x.dim() == 4 else x.std(dim=1).mean().item()
    if spatial < 0.01 * std:
        raise SystemExit(f"{name}: the output hardly varies over positions ({spatial:.3e} vs std {std:.3e})")
    print(f"  {name:12s} {tuple(x.shape)}: mean {x.mean().item():+.4f} std {std:.4f} max |x| {mx:.3f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output folder (created; its model files are replaced)")
    ap.add_argument("--tiny", action="store_true", help="tiny configs on CPU (the same flow, for testing here)")
    ap.add_argument("--device", default=None, help="cuda (default for full size) or cpu (default with --tiny)")
    ap.add_argument("--seed", type=int, default=SEED)
    args = ap.parse_args()
    t_all = time.perf_counter()
    dev = torch.device(args.device or ("cpu" if args.tiny else "cuda"))
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("CUDA is not available (pass --device cpu to run on the CPU, slowly)")
    # fp32 references mean fp32: no TF32 in cuBLAS or cuDNN.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")

    import diffusers
    import transformers
    from diffusers import AutoencoderKL, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer
    size = "tiny" if args.tiny else "full"
    ucfg, ccfg, vcfg = (UNET_TINY, CLIP_TINY, VAE_TINY) if args.tiny else (UNET_SD15, CLIP_SD15, VAE_SD15)
    gpu = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    log(f"make_fullsize ({size}): torch {torch.__version__}, diffusers {diffusers.__version__}, "
        f"transformers {transformers.__version__}, device {gpu}, seed {args.seed}")
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    t0 = time.perf_counter()
    with torch.device(dev):
        unet = UNet2DConditionModel(**ucfg).eval()
        clip = CLIPTextModel(CLIPTextConfig(**ccfg)).eval()
        vae = AutoencoderKL(**vcfg).eval()
    gen = torch.Generator(device=dev).manual_seed(args.seed)
    for m in (unet, clip, vae):
        randomize(m, gen, dev)
    counts = {n: sum(p.numel() for p in m.parameters()) for n, m in (("unet", unet), ("clip", clip), ("vae", vae))}
    if not args.tiny:  # the counts the C++ tests pin for SD1.5
        assert counts == {"unet": 859520964, "clip": 123060480, "vae": 83653863}, counts
    log(f"models built and randomized: {counts}", t0)

    t0 = time.perf_counter()
    merges = (HERE.parents[1] / "models" / "sd15" / "data" / "clip_merges.txt").read_text(encoding="utf-8")
    merges = merges.split("\n")[1:tokgold.N_MERGES + 1]
    names, nbytes = save_folder(out / "diffusers", unet, clip, vae, merges)
    log(f"diffusers folder: {out / 'diffusers'}: {len(names)} files, {nbytes / 2**20:.1f} MiB: {', '.join(names)}", t0)
    t0 = time.perf_counter()
    single = single_file_tensors(unet, clip, vae)
    tmp = out / "sd15.safetensors.tmp"
    save_file(single, str(tmp), metadata={"format": "pt"})
    os.replace(tmp, out / "sd15.safetensors")
    log(f"single file: {out / 'sd15.safetensors'}: {len(single)} tensors, "
        f"{(out / 'sd15.safetensors').stat().st_size / 2**20:.1f} MiB (key maps match diffusers' converters)", t0)
    del single

    tokenizer = CLIPTokenizer.from_pretrained(str(out / "diffusers" / "tokenizer"))
    inp = make_inputs(torch.Generator().manual_seed(args.seed + 1), SIZES[size], ccfg, tokenizer, dev)
    results = {}
    for mode in ("fp32", "autocast_bf16", "bf16"):  # bf16 last: it casts the models
        t0 = time.perf_counter()
        results[mode] = run_models(unet, clip, vae, inp, mode)
        log(f"diffusers forward passes, {mode}", t0)
    ref = results["fp32"]
    print("outputs (fp32):")
    for k, v in ref.items():
        check_sane(k, v)
    spread = {}
    for k, v in ref.items():
        spread[k] = {m: {"rel": rel(results[m][k], v), "max_abs": (results[m][k] - v).abs().max().item()}
                     for m in ("autocast_bf16", "bf16")}
        s = spread[k]
        print(f"  {k:12s} diffusers bf16 vs fp32: autocast rel {s['autocast_bf16']['rel']:.3e} "
              f"(max abs {s['autocast_bf16']['max_abs']:.3e}), bf16 model rel {s['bf16']['rel']:.3e} "
              f"(max abs {s['bf16']['max_abs']:.3e})")
        if max(s["autocast_bf16"]["rel"], s["bf16"]["rel"]) > 0.2:
            raise SystemExit(f"{k}: diffusers' own bf16 result is {s['bf16']['rel']:.2f} away from fp32: "
                             "the outputs are too ill-conditioned to check a bf16 implementation against")

    tensors = {}
    for k, v in inp.items():
        if k == "clip.ids":
            tensors[k] = v.int().cpu().contiguous()
        elif v.dim() == 4:
            tensors[k] = nhwc(v)
        else:
            tensors[k] = v.float().cpu().contiguous()
    for k, v in ref.items():
        tensors[k] = nhwc(v) if v.dim() == 4 else v.contiguous()
    meta = {"generator": "tests/golden/make_fullsize.py", "size": size, "seed": str(args.seed), "weights": "f16",
            "device": gpu, "captions": json.dumps(CAPTIONS), "spread": json.dumps(spread),
            "models": json.dumps({"torch": torch.__version__, "diffusers": diffusers.__version__,
                                  "transformers": transformers.__version__, "parameters": counts})}
    if args.tiny:
        folder = out / "diffusers"
        meta["single_file_configs"] = json.dumps(
            {k: (folder / k / "config.json").read_text() for k in ("unet", "text_encoder", "vae")})
    tmp = out / "reference.safetensors.tmp"
    save_file(tensors, str(tmp), metadata=meta)
    os.replace(tmp, out / "reference.safetensors")
    log(f"reference: {out / 'reference.safetensors'}: {', '.join(f'{k} {list(v.shape)}' for k, v in tensors.items())}")
    log("make_fullsize: done", t_all)


if __name__ == "__main__":
    main()
