#!/usr/bin/env python3
"""Golden data for tests/test_clip.cpp: transformers' CLIPTextModel on a tiny config.

Writes tests/golden/data/clip/:
  clip_tiny.safetensors           random weights, transformers / diffusers text_encoder keys
  clip_tiny_original.safetensors  the same weights under an SD single file's keys
                                  (cond_stage_model.transformer.text_model.*, with the
                                  position_ids buffer old checkpoints carry)
  clip_tiny_io.safetensors        ids, inputs_embeds, R, outputs and input-gradients:
    ids [2, 77] i32, out_last / out_skip2 [2, 77, 32]  (clip_skip 1 / 2)
    inputs_embeds [2, 77, 32] = token_embedding(ids), R [2, 77, 32],
    grad_last / grad_skip2: d sum(out * R) / d inputs_embeds,
    long_ids [3, 77] i32 (one prompt, 3 chunks), out_long_skip2 [1, 227, 32]: kohya's joining.
Run with the golden venv: /work/venv-golden/bin/python tests/golden/make_clip_golden.py
Deterministic (seeded, CPU, fp64 math rounded to fp32 at the end).
"""
import pathlib

import torch
from safetensors.torch import save_file
from transformers import CLIPTextConfig, CLIPTextModel

OUT = pathlib.Path(__file__).resolve().parent / "data" / "clip"
# Must equal sd::ClipConfig::tiny().
BOS, EOS, L = 998, 999, 77
CONFIG = dict(vocab_size=1000, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
              max_position_embeddings=L, hidden_act="quick_gelu", layer_norm_eps=1e-5, bos_token_id=BOS,
              eos_token_id=EOS, pad_token_id=1)


def random_model(gen):
    model = CLIPTextModel(CLIPTextConfig(**CONFIG)).eval()
    # transformers' init leaves layer norms at 1 / 0 and tiny embeddings; draw every tensor so each
    # weight changes the output visibly (a wrongly loaded tensor cannot hide).
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "layer_norm" in name:
                base = 1.0 if name.endswith("weight") else 0.0
                p.copy_(base + 0.2 * torch.randn(p.shape, generator=gen))
            elif "embedding" in name:
                p.copy_(0.5 * torch.randn(p.shape, generator=gen))
            elif name.endswith("weight"):
                p.copy_(torch.randn(p.shape, generator=gen) / p.shape[1] ** 0.5)
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
    return model


def prompt_ids(gen, n_tokens):
    """<BOS>, n_tokens random tokens, <EOS>, padded with <EOS> to 77 (CLIP's SD1.5 padding)."""
    body = torch.randint(0, BOS, (n_tokens,), generator=gen).tolist()
    ids = [BOS] + body + [EOS]
    return ids + [EOS] * (L - len(ids))


def text_model(model):
    """transformers 5 flattened CLIPTextModel (no .text_model); 4.x nests it."""
    return getattr(model, "text_model", model)


def encode(model, ids, clip_skip, embeds=None):
    """Hidden states as kohya's sd-scripts takes them: hidden_states[-clip_skip], then the final
    layer norm. embeds replaces token_embedding(ids) (a hook), so gradients reach it."""
    hook = None
    if embeds is not None:
        hook = text_model(model).embeddings.token_embedding.register_forward_hook(lambda m, i, o: embeds)
    try:
        out = model(input_ids=ids, output_hidden_states=True, return_dict=True)
    finally:
        if hook is not None:
            hook.remove()
    if clip_skip == 1:
        return out.last_hidden_state
    return text_model(model).final_layer_norm(out.hidden_states[-clip_skip])


def join_chunks_like_kohya(hidden, n_chunks):
    """[B*n, 77, D] -> [B, n*75 + 2, D]: the first <BOS>, each chunk's 75 inner states, the last
    state (kohya's get_hidden_states for SD1 with max_token_length)."""
    b = hidden.shape[0] // n_chunks
    h = hidden.reshape(b, -1, hidden.shape[-1])
    parts = [h[:, :1]]
    for start in range(1, n_chunks * (L - 2), L):
        parts.append(h[:, start:start + L - 2])
    parts.append(h[:, -1:])
    return torch.cat(parts, dim=1)


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator().manual_seed(20240414)
    model = random_model(gen).double()
    # Every SD1.5 text_encoder file written so far (transformers 4) prefixes keys with "text_model.";
    # transformers 5 drops it from its module tree (and reads both).
    state = {("" if k.startswith("text_model.") else "text_model.") + k: v.float().contiguous()
             for k, v in model.state_dict().items() if not k.endswith("position_ids")}
    # One metadata key: safetensors writes several in a random order, and reruns should give
    # byte-identical files.
    meta = {"generator": "tests/golden/make_clip_golden.py, config " + repr(CONFIG)}
    save_file(state, OUT / "clip_tiny.safetensors", metadata=meta)
    original = {"cond_stage_model.transformer." + k: v for k, v in state.items()}
    original["cond_stage_model.transformer.text_model.embeddings.position_ids"] = torch.arange(L).unsqueeze(0)
    save_file(original, OUT / "clip_tiny_original.safetensors", metadata=meta)

    ids = torch.tensor([prompt_ids(gen, 12), prompt_ids(gen, 75)])
    io = {"ids": ids.int()}
    with torch.no_grad():
        io["out_last"] = encode(model, ids, 1)
        io["out_skip2"] = encode(model, ids, 2)
        # One prompt of 3 chunks: the ids kohya builds are <BOS> + 75 tokens + <EOS> per chunk.
        long_ids = torch.tensor([prompt_ids(gen, 75), prompt_ids(gen, 75), prompt_ids(gen, 40)])
        io["long_ids"] = long_ids.int()
        io["out_long_skip2"] = join_chunks_like_kohya(encode(model, long_ids, 2), 3)
        io["inputs_embeds"] = text_model(model).embeddings.token_embedding(ids)
    io["R"] = torch.randn(io["out_last"].shape, generator=gen).double()  # fp32-exact, as the C++ side reads it
    for skip, name in ((1, "grad_last"), (2, "grad_skip2")):
        embeds = io["inputs_embeds"].clone().requires_grad_(True)
        (encode(model, ids, skip, embeds) * io["R"]).sum().backward()
        io[name] = embeds.grad
    # The hook path must equal the ids path.
    with torch.no_grad():
        assert torch.allclose(encode(model, ids, 1, io["inputs_embeds"]), io["out_last"], rtol=0, atol=1e-12)
    io = {k: (v.float() if v.is_floating_point() else v).contiguous() for k, v in io.items()}
    save_file(io, OUT / "clip_tiny_io.safetensors", metadata=meta)
    for f in sorted(OUT.iterdir()):
        print(f"{f.name}: {f.stat().st_size} bytes")


if __name__ == "__main__":
    main()
