#!/usr/bin/env python3
"""Golden data for tests/test_sd2_loaders.cpp: the keys and shapes of the SD2.x LoRA files kohya
sd-scripts' networks.lora and LyCORIS's lycoris.kohya write, built by their own create_network on
kohya's SD2.x models at full size (weights zero, never run): its original_unet
UNet2DConditionModel with SD2's settings (attention_head_dim [5, 10, 20, 20], context 1024, Linear
projections, as train_util builds it from a diffusers SD2 folder) and transformers' CLIPTextModel
as model_util's v2 converter configures it (width 1024, 16 heads, 23 layers, gelu).

Run with the golden venv (kohya's original_unet needs einops), an sd-scripts checkout and a LyCORIS
checkout (made with sd-scripts 48d368f and LyCORIS 3.2.0.post2, the checkouts of lycoris_kohya_files.py):
  ~/venv-golden/bin/python tests/golden/make_sd2_lora_keys.py --sd-scripts /work/ref/sd-scripts \
      --lycoris /work/ref/LyCORIS
Writes tests/golden/data/sd2/lora_keys.json:
  modules   every module name any configuration made, with its base weight shape, in one list
  configs   per configuration: network module, dim, alpha, network args, whether the text encoder
            was applied (train_network.py's apply_to(te, unet, train_text_encoder, True)), the
            indices of its modules, its key count, and by_weight_shape: per base weight shape
            (JSON) the suffixes its modules save with their shapes (the table rebuilds the
            state_dict's key set exactly: checked here).
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lycoris_kohya_files as lkf  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "sd2", "lora_keys.json")

# (name, network module, dim, alpha, network args, train the text encoder)
CONFIGS = [
    ("lora", "networks.lora", 4, 1.0, {}, True),
    ("lora_unet_only", "networks.lora", 4, 1.0, {}, False),
    ("locon", "networks.lora", 4, 1.0, {"conv_dim": "4", "conv_alpha": "1"}, True),
    ("loha", "lycoris.kohya", 4, 1.0, {"algo": "loha"}, True),
]


def sd2_models(original_unet):
    from transformers import CLIPTextConfig

    cfg = CLIPTextConfig(vocab_size=49408, hidden_size=1024, intermediate_size=4096, num_hidden_layers=23,
                         num_attention_heads=16, max_position_embeddings=77, hidden_act="gelu")
    with lkf.quiet(), torch.device("meta"):
        # train_util's UNet from a diffusers SD2 folder: sample 96 (64 for 2-base; the names and shapes
        # do not depend on it), SD2's per-level heads, context 1024, Linear projections, upcast.
        unet = original_unet.UNet2DConditionModel(96, [5, 10, 20, 20], 1024, True, True)
        te = lkf.clip_text_model(cfg)
    for model in (unet, te):
        model.to_empty(device="cpu")
        with torch.no_grad():
            for t in list(model.parameters()) + list(model.buffers()):
                t.zero_()
    assert isinstance(unet.down_blocks[0].attentions[0].proj_in, torch.nn.Linear)
    return unet, te


def base_shape(lora):
    org = lora.org_module[0] if isinstance(lora.org_module, list) else lora.org_module
    return list(org.weight.shape)


def build(module, te, unet, dim, alpha, args, train_te):
    kw = lkf.kohya_kwargs(args)
    with lkf.quiet():
        net = module.create_network(1.0, dim, alpha, None, te, unet, neuron_dropout=None, **kw)
        loras = list(getattr(net, "text_encoder_loras", [])) + list(getattr(net, "unet_loras", []))
        if not loras:
            loras = list(net.loras)
        shapes = {lora.lora_name: base_shape(lora) for lora in loras}
        net.apply_to(te, unet, train_te, True)
    return net, shapes


def lycoris_version(root):
    """setup.py's version string (the checkout's own record)."""
    with open(os.path.join(root, "setup.py")) as f:
        for line in f:
            if line.strip().startswith("version="):
                return line.split("=", 1)[1].strip().strip(",").strip('"')
    return "unknown"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sd-scripts", default="/work/ref/sd-scripts")
    ap.add_argument("--lycoris", default="/work/ref/LyCORIS")
    args = ap.parse_args()
    original_unet = lkf.load_sd_scripts(args.sd_scripts)
    sys.path.insert(0, args.lycoris)
    import lycoris.kohya as lk
    import networks.lora as kl

    unet, te = sd2_models(original_unet)
    modules, configs = [], {}
    index = {}
    for name, module, dim, alpha, network_args, train_te in CONFIGS:
        net, shapes = build(kl if module == "networks.lora" else lk, te, unet, dim, alpha, network_args, train_te)
        state = net.state_dict()
        # The module names left after apply_to (networks.lora drops the text encoder's without it).
        names = sorted({k.split(".")[0] for k in state})
        table = {}
        for n in names:
            if n not in index:
                index[n] = len(modules)
                modules.append([n, shapes[n]])
            prefix = n + "."
            entry = {k[len(prefix):]: list(v.shape) for k, v in state.items() if k.startswith(prefix)}
            key = json.dumps(shapes[n])
            assert table.setdefault(key, entry) == entry, (name, n, key)
        rebuilt = {f"{n}.{s}" for n in names for s in table[json.dumps(shapes[n])]}
        assert rebuilt == set(state), f"{name}: the shape table does not rebuild the state_dict"
        assert any(n.startswith("lora_te_") for n in names) == train_te, name
        configs[name] = {"network_module": module, "network_dim": dim, "network_alpha": alpha,
                         "network_args": network_args, "train_text_encoder": train_te,
                         "modules": [index[n] for n in names], "keys": len(state), "by_weight_shape": table}
        if hasattr(net, "restore"):
            net.restore()
        print(f"{name}: {len(names)} modules, {len(state)} keys")
    out = {"modules": modules, "configs": configs,
           "note": "modules: [lora name, base weight shape]; configs list indices into it; by_weight_shape "
                   "is keyed by the base weight shape as JSON and maps each key suffix to its shape",
           "sd_scripts": os.path.abspath(args.sd_scripts), "lycoris": os.path.abspath(args.lycoris),
           "lycoris_version": lycoris_version(args.lycoris), "torch": torch.__version__}
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(out, f, indent=None, separators=(",", ":"), sort_keys=True)
        f.write("\n")
    print(f"wrote {OUT} ({os.path.getsize(OUT)} bytes)")


if __name__ == "__main__":
    sys.exit(main())
