#!/usr/bin/env python3
"""Golden data for tests/test_lora_blocks.cpp (and test_sdtrain_option_sweep.cpp's repeated
--network_args): kohya's block-wise networks, LoRA+ groups and max norm, made by sd-scripts' own
networks/lora.py (at 48d368f) and its train_network.py parser.

Run with the golden venv and an sd-scripts checkout:
  ~/venv-golden/bin/python tests/golden/make_kohya_network_golden.py --sd-scripts /work/ref/sd-scripts

Writes tests/golden/data/kohya/network_blocks.json:
  unet_modules    every UNet LoRA name of a LoCon network (conv_dim) on a diffusers UNet of SD1.5's
                  block layout (tiny channels: the names are SD1.5's), each with get_block_index
  lr_weights      get_block_lr_weight(False, down, mid, up, threshold) of parse_block_lr_kwargs's
                  parsed args, for presets, offsets, short and long lists, thresholds
  networks        create_network(1.0, dim, alpha, vae, text_encoder, unet, **kwargs) for network
                  args: prepare_optimizer_params(te_lr, unet_lr, lr)'s groups (description, lr), each
                  UNet module's [dim, alpha, group of lora_down, group of lora_up] (null: not
                  created), and the text encoder's module count with its distinct such entries
  max_norm        apply_max_norm_regularization over a stand-in network's state_dict of three
                  modules (Linear, 1x1 conv, 3x3 conv) at several max norms: keys_scaled, the mean
                  and max norm, and the tensors after scaling
  repeated_network_args  train_network.py's parser given --network_args twice (what it keeps)
The text encoder is a 12-layer CLIPTextModel of tiny width (SD1.5's layer count). Seeded.
"""
import argparse
import importlib.util
import json
import os

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "kohya", "network_blocks.json")

LR_WEIGHT_CASES = [
    {"down_lr_weight": "sine"},
    {"up_lr_weight": "cosine+0.5"},
    {"down_lr_weight": "linear", "up_lr_weight": "reverse_linear"},
    {"down_lr_weight": "zeros+0.25", "mid_lr_weight": "2"},
    {"down_lr_weight": "0,0.5,,1", "up_lr_weight": "1,1,1,1,1,1,1,1,1,1,1,1,1,1"},
    {"mid_lr_weight": "0.5,3"},
    {"down_lr_weight": "sine", "block_lr_zero_threshold": "0.5"},
    {"up_lr_weight": "1,-1,0.1,0.2", "block_lr_zero_threshold": "-2"},
    {"up_lr_weight": "0.1, 0.2 ,1e-3,1_0.5", "mid_lr_weight": "nan"},
]

NETWORK_CASES = [
    {"dim": 8, "alpha": 4.0, "kwargs": {}},
    {"dim": 8, "alpha": 4.0, "kwargs": {"conv_dim": "4", "conv_alpha": "2"}},
    {"dim": 4, "alpha": 1.0,
     "kwargs": {"block_dims": "2,2,2,2,4,4,4,8,8,8,8,8,8,8,8,8,8,8,8,4,4,4,2,2,2",
                "block_alphas": "1,1,1,1,2,2,2,4,4,4,4,4,0,4,4,4,4,4,4,2,2,2,1,1,1"}},
    {"dim": 4, "alpha": 1.0,
     "kwargs": {"block_dims": "2,2,2,2,4,4,4,8,8,8,8,8,8,8,8,8,8,8,8,4,4,4,2,2,2",
                "conv_block_dims": "1,1,1,1,2,2,2,0,2,2,2,2,3,2,2,2,2,2,2,2,2,0,1,1,1",
                "conv_block_alphas": "1,1,1,1,1,1,1,1,1,1,1,1,0.5,1,1,1,1,1,1,1,1,1,1,1,1"}},
    {"dim": 8, "alpha": 8.0, "kwargs": {"down_lr_weight": "0,0,0.5,1,1,1,1,1,1,1,1,1", "mid_lr_weight": "0",
                                          "up_lr_weight": "cosine"}},
    {"dim": 8, "alpha": 8.0, "kwargs": {"conv_dim": "4", "up_lr_weight": "sine", "block_lr_zero_threshold": "0.3"}},
    {"dim": 4, "alpha": 1.0, "kwargs": {"loraplus_lr_ratio": "16"}},
    {"dim": 4, "alpha": 1.0, "kwargs": {"loraplus_lr_ratio": "16", "loraplus_unet_lr_ratio": "4",
                                          "down_lr_weight": "linear"}},
    {"dim": 4, "alpha": 1.0, "kwargs": {"loraplus_lr_ratio": "8", "loraplus_text_encoder_lr_ratio": "0"}},
]
LRS = {"text_encoder_lr": 5e-5, "unet_lr": 1e-4, "learning_rate": 2e-4}


def tiny_models():
    import torch
    from diffusers import UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    torch.manual_seed(0)
    unet = UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, layers_per_block=2, block_out_channels=(8, 16, 32, 32),
        down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=16, attention_head_dim=2, norm_num_groups=4)
    te = CLIPTextModel(CLIPTextConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=12,
                                      num_attention_heads=2, vocab_size=64, max_position_embeddings=77))
    return unet, te


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sd-scripts", required=True)
    args = ap.parse_args()
    spec = importlib.util.spec_from_file_location(
        "make_kohya_metadata", os.path.join(os.path.dirname(os.path.abspath(__file__)), "make_kohya_metadata.py"))
    metadata_script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(metadata_script)
    train_network = metadata_script.load_sd_scripts(os.path.abspath(args.sd_scripts))
    import torch
    from networks import lora

    unet, te = tiny_models()
    out = {}

    # The module names of the widest network (LoCon) and their blocks.
    lora.LoRANetwork.UNET_TARGET_REPLACE_MODULE = ["Transformer2DModel"]  # create_network extends it in place
    widest = lora.create_network(1.0, 4, 1.0, None, te, unet, conv_dim="4")
    names = [m.lora_name for m in widest.unet_loras]
    out["unet_modules"] = [[n, lora.get_block_index(n)] for n in names]

    out["lr_weights"] = []
    for kw in LR_WEIGHT_CASES:
        w = lora.parse_block_lr_kwargs(False, kw)
        out["lr_weights"].append({"kwargs": kw, "weights": [x if x == x else "nan" for x in w]})

    out["networks"] = []
    for case in NETWORK_CASES:
        lora.LoRANetwork.UNET_TARGET_REPLACE_MODULE = ["Transformer2DModel"]
        net = lora.create_network(1.0, case["dim"], case["alpha"], None, te, unet, **case["kwargs"])
        params, descriptions = net.prepare_optimizer_params(LRS["text_encoder_lr"], LRS["unet_lr"], LRS["learning_rate"])
        group_of = {}
        for gi, g in enumerate(params):
            for p in g["params"]:
                group_of[id(p)] = gi

        def module_groups(m):
            return [group_of.get(id(m.lora_down.weight)), group_of.get(id(m.lora_up.weight))]

        by_name = {m.lora_name: m for m in net.unet_loras}
        unet_modules = []
        for n in names:
            m = by_name.get(n)
            unet_modules.append(None if m is None else [m.lora_dim, float(m.alpha)] + module_groups(m))
        te_modules = sorted({tuple([m.lora_dim, float(m.alpha)] + module_groups(m)) for m in net.text_encoder_loras})
        out["networks"].append({
            "dim": case["dim"], "alpha": case["alpha"], "kwargs": case["kwargs"], "lrs": LRS,
            "unet_modules": unet_modules,
            "te_modules": {"count": len(net.text_encoder_loras), "distinct": [list(t) for t in te_modules]},
            "groups": [{"description": d, "lr": g["lr"]} for d, g in zip(descriptions, params)],
        })

    # Max norm over a stand-in network: the method reads only self.state_dict().
    torch.manual_seed(1)
    shapes = {"lora_unet_a_linear": ([3, 5], [6, 3], 2.0), "lora_unet_b_conv1x1": ([3, 5, 1, 1], [6, 3, 1, 1], 3.0),
              "lora_unet_c_conv3x3": ([3, 4, 3, 3], [6, 3, 1, 1], 1.5)}
    spread = {"lora_unet_a_linear": 0.3, "lora_unet_b_conv1x1": 1.0, "lora_unet_c_conv3x3": 2.0}
    cases = []
    for max_norm, scale in [(0.5, 1.0), (2.0, 0.1), (4.0, 1.0)]:  # all, none and some modules scaled
        sd = {}
        for k, (down, up, alpha) in shapes.items():
            sd[k + ".lora_down.weight"] = torch.randn(down) * scale * spread[k]
            sd[k + ".lora_up.weight"] = torch.randn(up) * scale * spread[k]
            sd[k + ".alpha"] = torch.tensor(alpha)
        before = {k: v.flatten().tolist() for k, v in sd.items()}

        class StandIn:
            def state_dict(self):
                return sd

        keys_scaled, mean, maximum = lora.LoRANetwork.apply_max_norm_regularization(StandIn(), max_norm, "cpu")
        cases.append({"max_norm": max_norm, "before": before,
                      "after": {k: v.flatten().tolist() for k, v in sd.items() if not k.endswith("alpha")},
                      "keys_scaled": keys_scaled, "average_key_norm": mean, "max_key_norm": maximum})
    out["max_norm"] = {"shapes": {k: {"down": d, "up": u, "alpha": a} for k, (d, u, a) in shapes.items()},
                       "cases": cases}

    parser = train_network.setup_parser()
    base = ["--pretrained_model_name_or_path", "m", "--output_dir", "o", "--network_module", "networks.lora"]
    repeated = parser.parse_args(base + ["--network_args", "conv_dim=4", "conv_alpha=1", "--network_args",
                                         "rank_dropout=0.1"])
    out["repeated_network_args"] = repeated.network_args

    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(out, f, indent=None, separators=(",", ":"))
        f.write("\n")
    print("wrote", OUT, os.path.getsize(OUT), "bytes")


if __name__ == "__main__":
    main()
