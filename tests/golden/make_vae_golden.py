#!/usr/bin/env python3
"""Golden data for the VAE (models/sd15/vae.cpp), checked by tests/test_vae.cpp.

Builds diffusers' AutoencoderKL with a tiny config (two levels of 8 and 16 channels, 4 groups, one
ResNet per encoder level) and random weights (norms and biases perturbed too, so every tensor
matters), then writes to tests/golden/data/vae/:
  weights_diffusers.safetensors  the state dict under diffusers' keys
  weights_original.safetensors   the same tensors under the original single-file keys
                                 (first_stage_model.*, attention as 1x1 convs), mapped by
                                 original_key() below and checked against diffusers' own converter
  io.safetensors                 inputs, outputs and input-gradients, all NHWC f32:
    x [B,H,W,3], moments [B,h,w,8] (quant_conv output), noise [B,h,w,4],
    sample [B,h,w,4] = sf * (mean + std * noise), r_enc [B,h,w,8], grad_x = d sum(moments * r_enc) / dx,
    z [B,h,w,4] (scaled latent), image [B,H,W,3] = decode(z / sf), r_dec [B,H,W,3],
    grad_z = d sum(image * r_dec) / dz
  sd15_keys.txt                  every tensor of the full-size SD1.5 VAE: diffusers key, original key
                                 and PyTorch shape, for the C++ naming test
References are computed in float64 from the f32 weights and inputs, then stored as f32.
Run with the golden venv: /work/venv-golden/bin/python tests/golden/make_vae_golden.py
"""
import os
import re

import torch
from diffusers import AutoencoderKL
from safetensors.torch import save_file

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "vae")
SF = 0.18215


def tiny_vae():
    return AutoencoderKL(
        in_channels=3, out_channels=3, latent_channels=4,
        down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2,
        block_out_channels=(8, 16), layers_per_block=1, norm_num_groups=4, sample_size=16,
        scaling_factor=SF)


def sd15_vae():
    return AutoencoderKL(
        in_channels=3, out_channels=3, latent_channels=4,
        down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4,
        block_out_channels=(128, 256, 512, 512), layers_per_block=2, norm_num_groups=32, sample_size=512,
        scaling_factor=SF)


def original_key(key, levels):
    """diffusers AutoencoderKL key -> original LDM key (without the first_stage_model. prefix)."""
    def resnet(rest):
        return rest.replace("conv_shortcut.", "nin_shortcut.")

    attn = {"group_norm.": "norm.", "to_q.": "q.", "to_k.": "k.", "to_v.": "v.", "to_out.0.": "proj_out."}
    m = re.fullmatch(r"(encoder|decoder)\.(.*)", key)
    if not m:
        return key  # quant_conv, post_quant_conv
    part, rest = m.groups()
    if rest.startswith("conv_norm_out."):
        return f"{part}.norm_out." + rest[len("conv_norm_out."):]
    m = re.fullmatch(r"mid_block\.resnets\.(\d)\.(.*)", rest)
    if m:
        return f"{part}.mid.block_{int(m[1]) + 1}." + resnet(m[2])
    m = re.fullmatch(r"mid_block\.attentions\.0\.(.*)", rest)
    if m:
        for a, b in attn.items():
            if m[1].startswith(a):
                return f"{part}.mid.attn_1.{b}" + m[1][len(a):]
        raise KeyError(key)
    m = re.fullmatch(r"(down|up)_blocks\.(\d+)\.(resnets|downsamplers|upsamplers)\.(\d+)\.(.*)", rest)
    if m:
        kind, i, sub, j, leaf = m.groups()
        i = int(i) if kind == "down" else levels - 1 - int(i)
        if sub == "resnets":
            return f"{part}.{kind}.{i}.block.{j}." + resnet(leaf)
        return f"{part}.{kind}.{i}.{kind}sample." + leaf
    return f"{part}.{rest}"  # conv_in, conv_out


def to_original(sd, levels):
    out = {}
    for k, v in sd.items():
        ok = original_key(k, levels)
        if ".mid.attn_1." in ok and ok.endswith(".weight") and v.ndim == 2:
            v = v[:, :, None, None]  # the original stores the attention projections as 1x1 convs
        out["first_stage_model." + ok] = v
    return out


def check_against_diffusers_converter(model, sd, levels):
    """Our original names and shapes must be what diffusers' single-file loader reads back
    (values too, unless the tensors live on the meta device)."""
    from diffusers.loaders.single_file_utils import convert_ldm_vae_checkpoint
    orig = to_original(sd, levels)
    back = convert_ldm_vae_checkpoint(orig, dict(model.config))
    assert set(back) == set(sd), (set(back) ^ set(sd))
    for k in sd:
        assert back[k].shape == sd[k].shape, k
        assert sd[k].is_meta or torch.equal(back[k], sd[k]), k


def nhwc(t):
    return t.permute(0, 2, 3, 1).contiguous().float()


def main():
    os.makedirs(OUT, exist_ok=True)
    torch.manual_seed(1234)
    model = tiny_vae().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and name.endswith(".weight"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif name.endswith(".bias"):
                p.copy_(0.1 * torch.randn_like(p))
    sd = {k: v.detach().float().contiguous() for k, v in model.state_dict().items()}
    check_against_diffusers_converter(model, sd, 2)
    save_file(sd, os.path.join(OUT, "weights_diffusers.safetensors"))
    save_file({k: v.contiguous() for k, v in to_original(sd, 2).items()},
              os.path.join(OUT, "weights_original.safetensors"))

    # Non-square images catch height/width mix-ups.
    B, H, W, h, w = 2, 16, 24, 8, 12
    x = torch.rand(B, 3, H, W) * 2 - 1
    noise = torch.randn(B, 4, h, w)
    r_enc = torch.randn(B, 8, h, w)
    z = torch.randn(B, 4, h, w) * SF * 4  # about the spread of real scaled latents
    r_dec = torch.randn(B, 3, H, W)

    m = model.double()
    xd = x.double().requires_grad_(True)
    moments = m.quant_conv(m.encoder(xd))
    (moments * r_enc.double()).sum().backward()
    with torch.no_grad():
        dist = m.encode(x.double()).latent_dist
        assert torch.allclose(dist.mean, moments[:, :4])
        sample = SF * (dist.mean + dist.std * noise.double())
    zd = z.double().requires_grad_(True)
    image = m.decode(zd / SF).sample
    (image * r_dec.double()).sum().backward()

    io = {"x": nhwc(x), "moments": nhwc(moments.detach()), "noise": nhwc(noise), "sample": nhwc(sample),
          "r_enc": nhwc(r_enc), "grad_x": nhwc(xd.grad), "z": nhwc(z), "image": nhwc(image.detach()),
          "r_dec": nhwc(r_dec), "grad_z": nhwc(zd.grad)}
    save_file(io, os.path.join(OUT, "io.safetensors"))

    # The full-size key list, from a model on the meta device (no weights are made).
    with torch.device("meta"):
        big = sd15_vae()
    big_sd = big.state_dict()
    check_against_diffusers_converter(big, big_sd, 4)
    with open(os.path.join(OUT, "sd15_keys.txt"), "w") as f:
        f.write("# diffusers key, original key (first_stage_model. prefix), PyTorch shape; by make_vae_golden.py\n")
        for k, v in big_sd.items():
            f.write(f"{k} first_stage_model.{original_key(k, 4)} {','.join(str(d) for d in v.shape)}\n")
    print("wrote", OUT, {k: tuple(v.shape) for k, v in io.items()})


if __name__ == "__main__":
    main()
