"""What LyCORIS's kohya wrapper (lycoris/kohya.py: create_network, apply_to, save_weights) writes, for
make_lycoris_golden.py.

1. kohya_sd15.json: the network as kohya sd-scripts builds it for SD1.5 (its own original_unet
   UNet2DConditionModel and transformers' CLIPTextModel at full size, weights zero), for several
   network_args: the modules each preset wraps (the lora names, their base weight shapes, the block
   class that put them in), and per configuration the file's dtype, the tensors save_weights writes
   for each base weight shape (suffix, shape, alpha value), the metadata it adds, and what diffusers'
   StableDiffusionLoraLoaderMixin.lora_state_dict makes of the file. The tables rebuild the saved
   key set exactly (checked here).
2. kohya_tiny_{loha,lokr,dora}.safetensors: whole files written by save_weights for a tiny tree with
   SD1.5's module names and block classes (and a tiny CLIPTextModel), adapter tensors seeded, with
   the kohya-side network metadata; kohya_tiny_expected.safetensors: each wrapped base weight and the
   weight LyCORIS's forward applies with the file loaded back by LyCORIS's own
   create_network_from_weights; kohya_tiny.json: keys in state_dict order (the order
   sshs_model_hash is taken in, checked here), file metadata and dtypes, diffusers' result.
"""
import contextlib
import hashlib
import io
import json
import logging
import os
import sys
import tempfile
import types

import torch
import torch.nn as nn
from safetensors.torch import load_file, save_file

ALGO_OF_CLASS = {"LoConModule": "locon", "LohaModule": "loha", "LokrModule": "lokr"}

SD15_CONFIGS = [
    ("loha", 8, 4.0, {"algo": "loha"}, None),
    ("loha_conv4_tucker", 8, 4.0, {"algo": "loha", "conv_dim": "4", "conv_alpha": "1", "use_tucker": "True"},
     None),
    ("loha_dora_fp16", 8, 4.0, {"algo": "loha", "dora_wd": "True"}, torch.float16),
    ("lokr", 8, 4.0, {"algo": "lokr"}, None),
    ("lokr_f8_dim100000", 100000, 1.0, {"algo": "lokr", "factor": "8"}, None),
    ("lokr_f4_decompose_both_tucker", 8, 4.0,
     {"algo": "lokr", "factor": "4", "decompose_both": "True", "use_tucker": "True", "conv_dim": "4"}, None),
    ("lokr_decompose_both_False_string", 8, 4.0, {"algo": "lokr", "decompose_both": "False"}, None),
    ("lokr_dora", 8, 4.0, {"algo": "lokr", "dora_wd": "True"}, None),
    ("locon_dora", 8, 4.0, {"algo": "locon", "dora_wd": "True"}, None),
    ("lora_dora_in_attn_mlp_bf16", 8, 4.0,
     {"algo": "lora", "dora_wd": "True", "wd_on_output": "False", "preset": "attn-mlp"}, torch.bfloat16),
]
# Configurations stored as their difference from another one.
DIFF_FROM = {"loha_dora_fp16": "loha", "lokr_dora": "lokr", "lokr_decompose_both_False_string": "lokr"}
PRESETS = ["full", "full-lin", "attn-mlp", "attn-only", "unet-only", "unet-transformer-only",
           "unet-convblock-only"]
TINY_CONFIGS = [("loha", 2, 1.0, {"algo": "loha"}, torch.float16),
                ("lokr", 2, 1.0, {"algo": "lokr"}, None),
                ("dora", 2, 1.0, {"algo": "lora", "dora_wd": "True"}, torch.bfloat16)]


def load_sd_scripts(root):
    import diffusers.loaders.peft  # noqa: F401  (before the stand-in: diffusers probes torchvision)
    import transformers  # noqa: F401

    if "torchvision" not in sys.modules:
        try:
            import torchvision  # noqa: F401
        except ImportError:  # library.utils imports torchvision.transforms; nothing here uses it
            stand_in = types.ModuleType("torchvision")
            stand_in.transforms = types.SimpleNamespace()
            sys.modules["torchvision"] = stand_in
    sys.path.insert(0, root)
    from library import original_unet

    return original_unet


@contextlib.contextmanager
def quiet():
    """LyCORIS and kohya log through logging and print; the golden run keeps stdout for its own."""
    level = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        logging.disable(level)


class TextModelLevel(nn.Module):
    """The text_model level of transformers 4's CLIPTextModel (kohya's pinned transformers), which
    transformers 5 dropped: LyCORIS's names come from the module paths (lora_te_text_model_...)."""

    def __init__(self, model):
        super().__init__()
        self.text_model = model


def clip_text_model(cfg):
    from transformers import CLIPTextModel

    model = CLIPTextModel(cfg)
    return model if hasattr(model, "text_model") else TextModelLevel(model)


def sd15_models(original_unet):
    from transformers import CLIPTextConfig

    cfg = CLIPTextConfig(vocab_size=49408, hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                         num_attention_heads=12, max_position_embeddings=77, hidden_act="quick_gelu")
    with quiet(), torch.device("meta"):
        # train_util's SD1.5 UNet: sample 64, head dim 8, context 768, conv projections, no upcast.
        unet = original_unet.UNet2DConditionModel(64, 8, 768, False, False)
        te = clip_text_model(cfg)
    for model in (unet, te):
        model.to_empty(device="cpu")
        with torch.no_grad():
            for t in list(model.parameters()) + list(model.buffers()):
                t.zero_()
    return unet, te


def kohya_kwargs(network_args):
    """train_network.py: network_args as strings, then dropout from --network_dropout (None) if absent."""
    kw = dict(network_args)
    if "dropout" not in kw:
        kw["dropout"] = None
    return kw


def kohya_metadata(dim, alpha, network_args):
    """The network keys train_network.py itself puts in the metadata it hands to save_weights."""
    return {"ss_network_module": "lycoris.kohya", "ss_network_dim": str(dim), "ss_network_alpha": str(alpha),
            "ss_network_args": json.dumps(kohya_kwargs(network_args))}


def build_network(lk, te, unet, dim, alpha, network_args):
    with quiet():
        net = lk.create_network(1.0, dim, alpha, None, te, unet, neuron_dropout=None,
                                **kohya_kwargs(network_args))
        net.apply_to(te, unet, True, True)
    return net


def read_header(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    return header.pop("__metadata__", {}), header


def sort_metadata(path):
    """safetensors writes the metadata map in a random order; put it in key order (same bytes otherwise)."""
    with open(path, "r+b") as f:
        n = int.from_bytes(f.read(8), "little")
        raw = f.read(n)
        header = json.loads(raw)
        assert json.dumps(header, separators=(",", ":")).encode().ljust(n) == raw, path
        header["__metadata__"] = dict(sorted(header["__metadata__"].items()))
        f.seek(8)
        f.write(json.dumps(header, separators=(",", ":")).encode().ljust(n))


def owner_block(model, lora_name, prefix, targets):
    """The class of the outermost module whose target list put this module in, or 'name' if by name."""
    for name, module in model.named_modules():
        if type(module).__name__ in targets and lora_name.startswith(f"{prefix}_{name}_".replace(".", "_")):
            return type(module).__name__
    return "name"


def module_list(net, te, unet, lk):
    cls = lk.LycorisNetworkKohya
    out = []
    for lora in net.loras:
        te_side = lora.lora_name.startswith(cls.LORA_PREFIX_TEXT_ENCODER)
        if te_side:
            model, prefix, targets = te, cls.LORA_PREFIX_TEXT_ENCODER, cls.TEXT_ENCODER_TARGET_REPLACE_MODULE
        else:
            model, prefix, targets = unet, cls.LORA_PREFIX_UNET, cls.UNET_TARGET_REPLACE_MODULE
        w = lora.org_module[0].weight
        out.append([lora.lora_name, type(lora.org_module[0]).__name__, list(w.shape),
                    owner_block(model, lora.lora_name, prefix, targets)])
    return out


def shape_table(net, header, state):
    """Per base weight shape: {suffix: shape} and the alpha value (the same for every module)."""
    table = {}
    for lora in net.loras:
        shape = json.dumps(list(lora.org_module[0].weight.shape))
        prefix = lora.lora_name + "."
        keys = {k[len(prefix):]: header[k]["shape"] for k in header if k.startswith(prefix)}
        entry = {"tensors": keys, "alpha": state[f"{lora.lora_name}.alpha"].float().item(),
                 "class": type(lora).__name__}
        if isinstance(getattr(lora, "use_w1", None), bool):
            entry["lokr"] = {"use_w1": lora.use_w1, "use_w2": lora.use_w2, "tucker": bool(lora.tucker)}
        assert table.setdefault(shape, entry) == entry, (lora.lora_name, shape)
    rebuilt = {f"{lora.lora_name}.{s}" for lora in net.loras
               for s in table[json.dumps(list(lora.org_module[0].weight.shape))]["tensors"]}
    assert rebuilt == set(header), "the shape table does not rebuild the saved keys"
    return table


def table_diff(table, base):
    """Per base weight shape, what differs from the base configuration's entry."""
    out = {}
    for shape, entry in table.items():
        other = base[shape]
        d = {k: entry.get(k) for k in set(entry) | set(other)
             if k != "tensors" and entry.get(k) != other.get(k)}
        changed = {s: v for s, v in entry["tensors"].items() if other["tensors"].get(s) != v}
        removed = sorted(s for s in other["tensors"] if s not in entry["tensors"])
        if changed:
            d["tensors_added_or_changed"] = changed
        if removed:
            d["tensors_removed"] = removed
        if d:
            out[shape] = d
    return out


def diffusers_view(path):
    from diffusers.loaders.lora_pipeline import StableDiffusionLoraLoaderMixin

    sd = load_file(path)
    try:
        with quiet():
            converted, alphas = StableDiffusionLoraLoaderMixin.lora_state_dict(dict(sd))
    except Exception as e:  # what a user gets from load_lora_weights
        return {"loads": False, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"}
    return {"loads": True, "keys_in": len(sd), "keys_out": len(converted),
            "modules_in": sum(k.endswith(".lora_down.weight") for k in sd),
            "modules_out": sum(".down." in k or "lora_A" in k for k in converted),
            "dora_scale_in": sum("dora_scale" in k for k in sd),
            "magnitude_vectors_out": sum("lora_magnitude_vector" in k for k in converted),
            "alphas": len(alphas or {})}


def sd15_json(lk, original_unet, workdir):
    unet, te = sd15_models(original_unet)
    presets, configs, master = {}, {}, None
    for preset in PRESETS:
        net = build_network(lk, te, unet, 8, 4.0, {"algo": "loha", "preset": preset})
        mods = module_list(net, te, unet, lk)
        if master is None:
            master = mods
        names = [m[0] for m in master]
        extra = [m for m in mods if m[0] not in names]
        presets[preset] = {"modules": [names.index(m[0]) for m in mods if m[0] in names],
                           "not_in_full": extra, "count": len(mods)}
        net.restore()
    for name, dim, alpha, network_args, dtype in SD15_CONFIGS:
        net = build_network(lk, te, unet, dim, alpha, network_args)
        path = os.path.join(workdir, name + ".safetensors")
        with quiet():
            net.save_weights(path, dtype, {})
        metadata, header = read_header(path)
        state = net.state_dict()
        names = [m[0] for m in master]
        dtypes = sorted({v["dtype"] for v in header.values()})
        configs[name] = {"network_dim": dim, "network_alpha": alpha, "network_args": network_args,
                         "save_dtype": str(dtype), "file_dtypes": dtypes, "keys": len(header),
                         "modules": [names.index(lora.lora_name) for lora in net.loras],
                         "metadata_added_by_save_weights": sorted(metadata),
                         "kohya_metadata": kohya_metadata(dim, alpha, network_args),
                         "by_weight_shape": shape_table(net, header, state),
                         "diffusers_lora_state_dict": diffusers_view(path)}
        if name in DIFF_FROM:
            table = configs[name].pop("by_weight_shape")
            configs[name]["by_weight_shape_vs"] = DIFF_FROM[name]
            base = configs[DIFF_FROM[name]]["by_weight_shape"]
            configs[name]["by_weight_shape_diff"] = table_diff(table, base)
        net.restore()
        os.remove(path)
    return {"modules": master, "presets": presets, "configs": configs,
            "note": "modules: [lora name, layer class, base weight shape, the target block class that "
                    "put it in or 'name' (UNET_TARGET_REPLACE_NAME)] under preset full; presets and configs "
                    "list indices into it; by_weight_shape is keyed by the base weight shape as JSON, "
                    "'tensors' maps each key suffix to its shape; by_weight_shape_diff gives only what "
                    "differs from configuration by_weight_shape_vs"}


class CrossAttention(nn.Module):
    def __init__(self, dim, ctx):
        super().__init__()
        self.to_q = nn.Linear(dim, dim, bias=False)
        self.to_k = nn.Linear(ctx, dim, bias=False)
        self.to_v = nn.Linear(ctx, dim, bias=False)
        self.to_out = nn.ModuleList([nn.Linear(dim, dim), nn.Dropout(0.0)])


class GEGLU(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(dim, dim * 8)


class FeedForward(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.net = nn.ModuleList([GEGLU(dim), nn.Dropout(0.0), nn.Linear(dim * 4, dim)])


class BasicTransformerBlock(nn.Module):
    def __init__(self, dim, ctx):
        super().__init__()
        self.attn1, self.ff, self.attn2 = CrossAttention(dim, dim), FeedForward(dim), CrossAttention(dim, ctx)
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)


class Transformer2DModel(nn.Module):
    def __init__(self, c, ctx):
        super().__init__()
        self.norm = nn.GroupNorm(2, c)
        self.proj_in = nn.Conv2d(c, c, 1)
        self.transformer_blocks = nn.ModuleList([BasicTransformerBlock(c, ctx)])
        self.proj_out = nn.Conv2d(c, c, 1)


class ResnetBlock2D(nn.Module):
    def __init__(self, cin, cout, temb):
        super().__init__()
        self.norm1, self.conv1 = nn.GroupNorm(2, cin), nn.Conv2d(cin, cout, 3, padding=1)
        self.time_emb_proj = nn.Linear(temb, cout)
        self.norm2, self.conv2 = nn.GroupNorm(2, cout), nn.Conv2d(cout, cout, 3, padding=1)
        if cin != cout:
            self.conv_shortcut = nn.Conv2d(cin, cout, 1)


class Downsample2D(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, stride=2, padding=1)


class Upsample2D(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)


class TimestepEmbedding(nn.Module):
    def __init__(self, c, temb):
        super().__init__()
        self.linear_1, self.linear_2 = nn.Linear(c, temb), nn.Linear(temb, temb)


class Block(nn.Module):
    def __init__(self, **lists):
        super().__init__()
        for k, v in lists.items():
            setattr(self, k, nn.ModuleList(v))


class TinyUNet(nn.Module):
    """SD1.5's module paths and block classes at 4 channels (one block down, one up)."""

    def __init__(self, c=4, temb=8, ctx=6):
        super().__init__()
        self.conv_in = nn.Conv2d(4, c, 3, padding=1)
        self.time_embedding = TimestepEmbedding(c, temb)
        self.down_blocks = nn.ModuleList([Block(resnets=[ResnetBlock2D(c, c, temb)],
                                                attentions=[Transformer2DModel(c, ctx)],
                                                downsamplers=[Downsample2D(c)])])
        self.up_blocks = nn.ModuleList([Block(resnets=[ResnetBlock2D(2 * c, c, temb)],
                                              upsamplers=[Upsample2D(c)])])
        self.conv_out = nn.Conv2d(c, 4, 3, padding=1)


def tiny_models(seed):
    from transformers import CLIPTextConfig

    torch.manual_seed(seed)
    cfg = CLIPTextConfig(vocab_size=16, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                         num_attention_heads=2, max_position_embeddings=4)
    te, unet = clip_text_model(cfg), TinyUNet()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for model in (te, unet):
            for module in model.modules():
                if isinstance(module, (nn.Linear, nn.Conv2d)):
                    module.weight.copy_(torch.randn(module.weight.shape, generator=gen)
                                        / module.weight[0].numel() ** 0.5)
    return te, unet


def tiny_files(lk, out_dir, set_values, forward_weight, write_json):
    expected, info = {}, {}
    for name, dim, alpha, network_args, dtype in TINY_CONFIGS:
        te, unet = tiny_models(7)
        torch.manual_seed(11)
        net = build_network(lk, te, unet, dim, alpha, network_args)
        gen = torch.Generator().manual_seed(13)
        for lora in net.loras:
            set_values(lora, ALGO_OF_CLASS[type(lora).__name__], lora.org_module[0].weight.detach(), gen)
        path = os.path.join(out_dir, f"kohya_tiny_{name}.safetensors")
        metadata = kohya_metadata(dim, alpha, network_args)
        with quiet():
            net.save_weights(path, dtype, dict(metadata))
        sort_metadata(path)
        file_metadata, header = read_header(path)
        saved = load_file(path)
        order = list(net.state_dict().keys())
        digest = hashlib.sha256()
        for k in order:  # LyCORIS's precalculate_safetensors_hashes: each tensor's raw bytes, in order
            digest.update(saved[k].reshape(-1).view(torch.uint8).numpy().tobytes())
        assert file_metadata["sshs_model_hash"] == "0x" + digest.hexdigest(), name
        scales = {lora.lora_name: lora.scale for lora in net.loras}
        with quiet():
            loaded, _ = lk.create_network_from_weights(1.0, path, None, te, unet)
        for lora in loaded.text_encoder_loras + loaded.unet_loras:
            mine = {k: v.detach() for k, v in lora.custom_state_dict().items()}
            # A LoKr with both factors full reloads with lora_dim 1 and so alpha 1: its scale is 1 either way.
            for k in mine:
                on_file = saved[f"{lora.lora_name}.{k}"]
                assert k == "alpha" or torch.equal(mine[k].to(on_file.dtype), on_file), (lora.lora_name, k)
            assert lora.scale == scales[lora.lora_name], lora.lora_name
            with torch.no_grad():
                expected[f"{name}.merged.{lora.lora_name}"] = forward_weight(lora, 1.0).float().contiguous()
            expected[f"base.{lora.lora_name}"] = lora.org_module[0].weight.detach().clone().contiguous()
        assert len(loaded.text_encoder_loras + loaded.unet_loras) == len(net.loras), name
        info[name] = {"file": os.path.basename(path), "network_dim": dim, "network_alpha": alpha,
                      "network_args": network_args, "save_dtype": str(dtype), "metadata": file_metadata,
                      "state_dict_order": order,
                      "file_dtypes": sorted({v["dtype"] for v in header.values()}),
                      "diffusers_lora_state_dict": diffusers_view(path)}
    save_file(expected, os.path.join(out_dir, "kohya_tiny_expected.safetensors"),
              {"source": "lycoris_kohya_files.py"})
    write_json(os.path.join(out_dir, "kohya_tiny.json"), {
        "files": info, "expected": "kohya_tiny_expected.safetensors: base.<lora name> (fp32 base weight), "
        "<file>.merged.<lora name> (the weight LyCORIS's forward applies, the file loaded back by "
        "create_network_from_weights, multiplier 1)"})


def reload_input_axis_dora():
    """LyCORIS's own loader (make_module_from_state_dict) on a DoRA saved with wd_on_output=False."""
    from lycoris.modules import get_module, make_module
    from lycoris.modules.locon import LoConModule

    layer = nn.Linear(8, 6)
    m = LoConModule("m", layer, 1.0, 4, 4.0, weight_decompose=True, wd_on_out=False)
    sd = {f"m.{k}": v.detach() for k, v in m.custom_state_dict().items()}
    try:
        make_module(*get_module(sd, "m"), "m", layer)
    except RuntimeError as e:
        return f"fails: RuntimeError: {str(e).splitlines()[0][:120]}"
    return "loads"


def write_all(lycoris_root, sd_scripts_root, out_dir, write_json, set_values, forward_weight):
    import lycoris.kohya as lk

    original_unet = load_sd_scripts(sd_scripts_root)
    tiny_files(lk, out_dir, set_values, forward_weight, write_json)
    with tempfile.TemporaryDirectory() as workdir:
        table = sd15_json(lk, original_unet, workdir)
    table["lycoris_reload_of_input_axis_dora"] = reload_input_axis_dora()
    table["lycoris"] = os.path.abspath(lycoris_root)
    table["sd_scripts"] = os.path.abspath(sd_scripts_root)
    write_json(os.path.join(out_dir, "kohya_sd15.json"), table)
