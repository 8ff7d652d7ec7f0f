#!/usr/bin/env python3
"""Golden data for tests/test_unet.cpp: a tiny diffusers UNet2DConditionModel with random
weights, saved in both checkpoint layouts, and its output and input gradients.

Run with the golden virtualenv (torch, diffusers, safetensors):
    /work/venv-golden/bin/python tests/golden/make_unet_golden.py
Writes tests/golden/data/unet/:
    unet_diffusers.safetensors  the model's state dict under diffusers keys (unet/ folder layout)
    unet_original.safetensors   the same tensors under original single-file keys
                                (model.diffusion_model.input_blocks.1.1.proj_in.weight, ...)
    sd15_keys.txt               for the real SD1.5 config (built on the meta device, no weights):
                                one line per tensor, "diffusers_key original_key d0,d1,..."
                                (PyTorch shape), checked against diffusers' converter too
    io.safetensors              inputs and references, feature maps NHWC as the C++ side uses:
                                x [B,h,w,4], t [B], context [B,S,16], r [B,h,w,4],
                                eps [B,h,w,4], grad_x [B,h,w,4], grad_context [B,S,16]
                                with loss = sum(eps * r).
Weights are stored as f16 to keep the data small; they are rounded to f16 *before* the
reference runs, so the f16 file holds exactly the weights the reference used. The reference
runs in float64 (diffusers' sinusoidal timestep features are f32 whatever the model dtype, as
in ours), so the C++ f32 result is compared against an answer far more exact than itself.
The original-layout key map is written here from the LDM structure (independently of the
C++ one) and checked against diffusers' own single-file converter.
"""
import os
import sys

import torch
from diffusers import UNet2DConditionModel
from safetensors.torch import save_file

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "unet")

# Mirrors sd::UnetConfig::tiny() in models/sd15/unet.cpp.
CONFIG = dict(
    sample_size=8,
    in_channels=4,
    out_channels=4,
    block_out_channels=(16, 32),
    down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
    up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
    layers_per_block=1,
    attention_head_dim=2,  # diffusers' name for the number of heads in SD1.x configs
    cross_attention_dim=16,
    norm_num_groups=8,
    norm_eps=1e-5,
    flip_sin_to_cos=True,
    freq_shift=0,
)
BATCH, SIDE, CONTEXT_LEN = 2, 8, 7
TIMESTEPS = [37.0, 612.5]  # one fractional, as samplers produce

RESNET_RENAMES = [("norm1", "in_layers.0"), ("conv1", "in_layers.2"), ("time_emb_proj", "emb_layers.1"),
                  ("norm2", "out_layers.0"), ("conv2", "out_layers.3"), ("conv_shortcut", "skip_connection")]


def module_map(cfg):
    """diffusers module path -> (LDM module path, is_resnet), walked from the block structure."""
    n, L = len(cfg["block_out_channels"]), cfg["layers_per_block"]
    m = {"time_embedding.linear_1": ("time_embed.0", False), "time_embedding.linear_2": ("time_embed.2", False),
         "conv_in": ("input_blocks.0.0", False), "conv_norm_out": ("out.0", False), "conv_out": ("out.2", False)}
    ldm = 1  # input_blocks index
    for i, kind in enumerate(cfg["down_block_types"]):
        for j in range(L):
            m[f"down_blocks.{i}.resnets.{j}"] = (f"input_blocks.{ldm}.0", True)
            if kind.startswith("CrossAttn"):
                m[f"down_blocks.{i}.attentions.{j}"] = (f"input_blocks.{ldm}.1", False)
            ldm += 1
        if i + 1 < n:
            m[f"down_blocks.{i}.downsamplers.0.conv"] = (f"input_blocks.{ldm}.0.op", False)
            ldm += 1
    m["mid_block.resnets.0"] = ("middle_block.0", True)
    m["mid_block.attentions.0"] = ("middle_block.1", False)
    m["mid_block.resnets.1"] = ("middle_block.2", True)
    ldm = 0  # output_blocks index
    for i, kind in enumerate(cfg["up_block_types"]):
        attn = kind.startswith("CrossAttn")
        for j in range(L + 1):
            m[f"up_blocks.{i}.resnets.{j}"] = (f"output_blocks.{ldm}.0", True)
            if attn:
                m[f"up_blocks.{i}.attentions.{j}"] = (f"output_blocks.{ldm}.1", False)
            if j == L and i + 1 < n:
                m[f"up_blocks.{i}.upsamplers.0.conv"] = (f"output_blocks.{ldm}.{2 if attn else 1}.conv", False)
            ldm += 1
    return m


def original_key(modules, key):
    # The longest module path that prefixes the key owns it.
    owner = max((p for p in modules if key.startswith(p + ".")), key=len, default=None)
    if owner is None:
        raise KeyError(f"no LDM module for {key}")
    target, is_resnet = modules[owner]
    rest = key[len(owner) + 1:]
    if is_resnet:
        for a, b in RESNET_RENAMES:
            if rest.startswith(a + "."):
                rest = b + rest[len(a):]
                break
        else:
            raise KeyError(f"unknown resnet member {key}")
    return "model.diffusion_model." + target + "." + rest


def check_original_map(model, sd):
    """Our original-layout names: a bijection, and diffusers' single-file converter takes the
    renamed dict back to exactly the diffusers state dict. Returns the renamed dict."""
    modules = module_map(dict(model.config))
    orig = {original_key(modules, k): v for k, v in sd.items()}
    assert len(orig) == len(sd), "two diffusers keys map to one original key"
    from diffusers.loaders.single_file_utils import convert_ldm_unet_checkpoint
    back = convert_ldm_unet_checkpoint(dict(orig), dict(model.config))
    assert set(back) == set(sd), f"round trip keys differ: {sorted(set(back) ^ set(sd))[:10]}"
    for k, v in sd.items():
        assert back[k] is v or torch.equal(back[k].reshape(v.shape), v), f"round trip changed {k}"
    return orig


def write_sd15_keys(path):
    with torch.device("meta"):
        model = UNet2DConditionModel(cross_attention_dim=768, attention_head_dim=8)  # SD1.5's unet/config.json
    sd = model.state_dict()
    assert sum(v.numel() for v in sd.values()) == 859520964
    orig = check_original_map(model, sd)
    by_tensor = {id(v): k for k, v in orig.items()}
    with open(path, "w") as f:
        for k, v in sd.items():
            f.write(f"{k} {by_tensor[id(v)]} {','.join(str(d) for d in v.shape)}\n")


def random_value(name, p, gen):
    """f16 values of a sensible scale for parameter `name` shaped like p: norm gains around 1,
    other vectors around 0, matrices uniform with variance 1 / fan_in (also the text encoder of
    make_sampler_golden.py)."""
    u = torch.rand(p.shape, generator=gen, dtype=torch.float64) * 2 - 1
    if p.dim() == 1 and "norm" in name and name.endswith(".weight"):
        v = 1 + 0.2 * u
    elif p.dim() == 1:
        v = 0.1 * u
    else:
        v = u * (3.0 / (p[0].numel())) ** 0.5
    return v.to(torch.float16)


def randomize(model, gen):
    """Replaces every parameter (norm gains and biases included, so the key map is exercised by
    values, not only by names) with f16-representable values of a sensible scale."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(random_value(name, p, gen).to(p.dtype))


def main():
    os.makedirs(OUT, exist_ok=True)
    gen = torch.Generator().manual_seed(20240604)
    model = UNet2DConditionModel(**CONFIG).eval()
    randomize(model, gen)
    sd = {k: v.detach().to(torch.float16).contiguous() for k, v in model.state_dict().items()}

    orig = check_original_map(model, sd)
    write_sd15_keys(os.path.join(OUT, "sd15_keys.txt"))

    # The reference in float64.
    ref = model.to(torch.float64)
    x = torch.randn(BATCH, 4, SIDE, SIDE, generator=gen, dtype=torch.float64)
    ctx = torch.randn(BATCH, CONTEXT_LEN, CONFIG["cross_attention_dim"], generator=gen, dtype=torch.float64)
    r = torch.randn(BATCH, 4, SIDE, SIDE, generator=gen, dtype=torch.float64)
    # The inputs are rounded to f32 first: the C++ side reads them as f32.
    x, ctx, r = (a.float().double().requires_grad_(a is not r) for a in (x, ctx, r))
    t = torch.tensor(TIMESTEPS, dtype=torch.float32)
    eps = ref(x, t, encoder_hidden_states=ctx).sample
    (eps * r).sum().backward()

    # How far fp32 torch is from the reference, for the record.
    eps32 = model.to(torch.float32)(x.detach().float(), t, encoder_hidden_states=ctx.detach().float()).sample
    print(f"torch f32 vs f64: max |diff| / max |ref| = "
          f"{((eps32.double() - eps).abs().max() / eps.abs().max()).item():.3e}")

    nhwc = lambda a: a.detach().permute(0, 2, 3, 1).contiguous().float()
    save_file(sd, os.path.join(OUT, "unet_diffusers.safetensors"), metadata={"format": "pt"})
    save_file(orig, os.path.join(OUT, "unet_original.safetensors"), metadata={"format": "pt"})
    save_file({"x": nhwc(x), "t": t, "context": ctx.detach().float(), "r": nhwc(r), "eps": nhwc(eps),
               "grad_x": nhwc(x.grad), "grad_context": ctx.grad.float().contiguous()},
              os.path.join(OUT, "io.safetensors"))
    params = sum(v.numel() for v in sd.values())
    size = sum(os.path.getsize(os.path.join(OUT, f)) for f in os.listdir(OUT))
    print(f"{len(sd)} tensors, {params} parameters; eps max |{eps.abs().max().item():.3f}|; "
          f"data/unet holds {size / 1024:.0f} KiB")


if __name__ == "__main__":
    sys.exit(main())
