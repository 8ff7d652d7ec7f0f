#!/usr/bin/env python3
"""Golden data for tests/test_sd2.cpp: SD2.x's text encoder, an OpenCLIP ViT-H/14-style text tower
on a tiny config, as diffusers and kohya hold it (transformers' CLIPTextModel, gelu, one layer
fewer than the tower: SD2.x conditions on the penultimate hidden state).

Writes tests/golden/data/sd2/:
  clip_openclip.safetensors  a single file's text tower: cond_stage_model.model.* with 4
                             resblocks (attn.in_proj_weight holding q, k, v), text_projection,
                             logit_scale, as an SD2.x checkpoint stores it
  clip_diffusers.safetensors the same converted by diffusers' own single-file converter
                             (convert_open_clip_checkpoint), the last resblock dropped as kohya's
                             convert_ldm_clip_checkpoint_v2 and diffusers' ignore list do
  clip_io.safetensors        ids [2, 77] i32 (SD2.x's padding with "!" = 0), out [2, 77, 32] (the
                             3-layer model's last hidden state, final layer norm applied: what
                             kohya's get_hidden_states returns for v2), out_skip2 (clip_skip 2)
Run with the golden venv: ~/venv-golden/bin/python tests/golden/make_sd2_clip_golden.py
"""
import pathlib

import torch
from diffusers.loaders.single_file_utils import convert_open_clip_checkpoint
from safetensors.torch import save_file
from transformers import CLIPTextConfig, CLIPTextModel

OUT = pathlib.Path(__file__).resolve().parent / "data" / "sd2"
BOS, EOS, PAD, L = 998, 999, 0, 77
W, HEADS, MLP, TOWER = 32, 4, 64, 4
# Mirrors the test's ClipConfig{1000, 32, 3, 4, 64, 77, gelu_erf, 1e-5}.
CONFIG = dict(vocab_size=1000, hidden_size=W, intermediate_size=MLP, num_hidden_layers=TOWER - 1,
              num_attention_heads=HEADS, max_position_embeddings=L, hidden_act="gelu", layer_norm_eps=1e-5,
              bos_token_id=BOS, eos_token_id=EOS, pad_token_id=1, projection_dim=W)
P = "cond_stage_model.model."


def openclip_tower(gen):
    """The tower's tensors under OpenCLIP's names, drawn so every one moves the output."""
    r = lambda *s, scale=1.0: (scale * torch.randn(*s, generator=gen)).float()
    sd = {P + "token_embedding.weight": r(1000, W, scale=0.5), P + "positional_embedding": r(L, W, scale=0.5),
          P + "ln_final.weight": 1 + r(W, scale=0.2), P + "ln_final.bias": r(W, scale=0.2),
          P + "text_projection": r(W, W, scale=W ** -0.5), P + "logit_scale": torch.tensor(4.6052)}
    for l in range(TOWER):
        b = f"{P}transformer.resblocks.{l}."
        for ln in ("ln_1", "ln_2"):
            sd[b + ln + ".weight"] = 1 + r(W, scale=0.2)
            sd[b + ln + ".bias"] = r(W, scale=0.2)
        sd[b + "attn.in_proj_weight"] = r(3 * W, W, scale=W ** -0.5)
        sd[b + "attn.in_proj_bias"] = r(3 * W, scale=0.1)
        sd[b + "attn.out_proj.weight"] = r(W, W, scale=W ** -0.5)
        sd[b + "attn.out_proj.bias"] = r(W, scale=0.1)
        sd[b + "mlp.c_fc.weight"] = r(MLP, W, scale=W ** -0.5)
        sd[b + "mlp.c_fc.bias"] = r(MLP, scale=0.1)
        sd[b + "mlp.c_proj.weight"] = r(W, MLP, scale=MLP ** -0.5)
        sd[b + "mlp.c_proj.bias"] = r(W, scale=0.1)
    return sd


def prompt_ids(gen, n):
    body = torch.randint(1, BOS, (n,), generator=gen).tolist()
    ids = [BOS] + body + [EOS]
    return ids + [PAD] * (L - len(ids))


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator().manual_seed(20261201)
    tower = openclip_tower(gen)
    model = CLIPTextModel(CLIPTextConfig(**CONFIG)).eval()
    converted = convert_open_clip_checkpoint(model, tower)
    last = f"text_model.encoder.layers.{TOWER - 1}."
    kept = {k: v.contiguous() for k, v in converted.items() if not k.startswith(last)}
    assert len(kept) < len(converted), "the converter kept no last layer to drop"
    # transformers 5 flattened CLIPTextModel (no .text_model); 4.x nests it.
    flat = not hasattr(model, "text_model")
    to_model = {(k[len("text_model."):] if flat else k): v for k, v in kept.items()}
    missing, unexpected = model.load_state_dict(to_model, strict=False)
    assert not unexpected and all("position_ids" in k for k in missing), (missing, unexpected)

    ids = torch.tensor([prompt_ids(gen, 9), prompt_ids(gen, 75)], dtype=torch.long)
    m64 = model.double()
    with torch.no_grad():
        o = m64(ids, output_hidden_states=True)
        out = o.last_hidden_state
        tm = getattr(m64, "text_model", m64)
        skip2 = tm.final_layer_norm(o.hidden_states[-2])
    save_file(tower, OUT / "clip_openclip.safetensors")
    save_file(kept, OUT / "clip_diffusers.safetensors")
    save_file({"ids": ids.int(), "out": out.float(), "out_skip2": skip2.float()}, OUT / "clip_io.safetensors")
    print(f"{len(tower)} tower tensors, {len(kept)} converted; out max |{out.abs().max().item():.3f}|")


if __name__ == "__main__":
    main()
