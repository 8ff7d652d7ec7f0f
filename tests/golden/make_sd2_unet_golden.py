#!/usr/bin/env python3
"""Golden data for tests/test_sd2.cpp: a tiny diffusers UNet2DConditionModel with SD2.x's
settings (attention_head_dim as a per-level list, use_linear_projection, upcast_attention, its
own cross-attention width), random weights, both checkpoint layouts, output and input gradients.

Run with the golden virtualenv:
    ~/venv-golden/bin/python tests/golden/make_sd2_unet_golden.py
Writes tests/golden/data/sd2/:
    unet_diffusers.safetensors, unet_original.safetensors, unet_io.safetensors
as make_unet_golden.py does for SD1.x (the same random weights, inputs, f64 reference and
original-layout key map, checked against diffusers' single-file converter).
"""
import os
import sys

import torch
from diffusers import UNet2DConditionModel
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_unet_golden import BATCH, CONTEXT_LEN, SIDE, TIMESTEPS, check_original_map, randomize  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "sd2")

# Mirrors sd::UnetConfig::tiny_sd2() in models/sd15/unet.cpp.
CONFIG = dict(
    sample_size=8,
    in_channels=4,
    out_channels=4,
    block_out_channels=(16, 32),
    down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
    up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
    layers_per_block=1,
    attention_head_dim=(2, 4),  # SD2.x: heads per level (head dims 8 and 8 here, 64 in SD2)
    use_linear_projection=True,
    upcast_attention=True,
    cross_attention_dim=24,
    norm_num_groups=8,
    norm_eps=1e-5,
    flip_sin_to_cos=True,
    freq_shift=0,
)


def main():
    os.makedirs(OUT, exist_ok=True)
    gen = torch.Generator().manual_seed(20261201)
    model = UNet2DConditionModel(**CONFIG).eval()
    assert isinstance(model.down_blocks[0].attentions[0].proj_in, torch.nn.Linear)
    randomize(model, gen)
    sd = {k: v.detach().to(torch.float16).contiguous() for k, v in model.state_dict().items()}
    orig = check_original_map(model, sd)

    ref = model.to(torch.float64)
    x = torch.randn(BATCH, 4, SIDE, SIDE, generator=gen, dtype=torch.float64)
    ctx = torch.randn(BATCH, CONTEXT_LEN, CONFIG["cross_attention_dim"], generator=gen, dtype=torch.float64)
    r = torch.randn(BATCH, 4, SIDE, SIDE, generator=gen, dtype=torch.float64)
    x, ctx, r = (a.float().double().requires_grad_(a is not r) for a in (x, ctx, r))
    t = torch.tensor(TIMESTEPS, dtype=torch.float32)
    eps = ref(x, t, encoder_hidden_states=ctx).sample
    (eps * r).sum().backward()

    nhwc = lambda a: a.detach().permute(0, 2, 3, 1).contiguous().float()
    save_file(sd, os.path.join(OUT, "unet_diffusers.safetensors"), metadata={"format": "pt"})
    save_file(orig, os.path.join(OUT, "unet_original.safetensors"), metadata={"format": "pt"})
    save_file({"x": nhwc(x), "t": t, "context": ctx.detach().float(), "r": nhwc(r), "eps": nhwc(eps),
               "grad_x": nhwc(x.grad), "grad_context": ctx.grad.float().contiguous()},
              os.path.join(OUT, "unet_io.safetensors"))
    print(f"{len(sd)} tensors, {sum(v.numel() for v in sd.values())} parameters; "
          f"proj_in {tuple(sd['down_blocks.0.attentions.0.proj_in.weight'].shape)}; eps max |{eps.abs().max().item():.3f}|")


if __name__ == "__main__":
    sys.exit(main())
