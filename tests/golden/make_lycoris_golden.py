#!/usr/bin/env python3
"""LyCORIS's own LoHa / LoKr / DoRA modules on tiny layers, for the network types of issue 21
(tests/golden/data/lycoris/, facts in its NOTES.md).

Run with the golden venv and a LyCORIS checkout (imported from there, nothing is copied):
  ~/venv-golden/bin/python tests/golden/make_lycoris_golden.py --lycoris /work/ref/LyCORIS \
      --sd-scripts /work/ref/sd-scripts

1. loha.safetensors, lokr.safetensors, dora.safetensors and cases.json: per case (a Linear or a
   Conv2d wrapped by LohaModule, LokrModule or LoConModule) the base weight and bias, the adapter
   tensors under the names a LyCORIS file gives them (set to seeded values after LyCORIS's own init,
   so the update is not zero), an input x, LyCORIS's module.forward(x) in fp32 and fp64, the weight
   that forward applies (merged), the gradients of sum(y * gy), and, in cases.json, LyCORIS's init
   (which tensors start at zero, their statistics), scale, saved alpha, the LoKr factorisation and
   how LyCORIS's own merge (get_merged_weight, merge_to) relates to the weight forward applies.
2. kohya_sd15.json and kohya_tiny_*.safetensors: what lycoris.kohya (create_network, save_weights)
   writes, by lycoris_kohya_files.py.
The script checks its own outputs (y against the merged weight, LyCORIS's merge against forward,
the init claims) and writes the same bytes on every run.
"""
import argparse
import copy
import json
import math
import os
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "lycoris")
KAIMING = "kaiming_uniform(a=sqrt(5)): U(-1/sqrt(fan_in), 1/sqrt(fan_in))"

# LyCORIS's init of each tensor (read from lycoris/modules/*.py __init__, checked below).
INIT_RULES = {
    "locon": {"lora_down.weight": KAIMING, "lora_up.weight": "zeros", "lora_mid.weight": KAIMING},
    "loha": {"hada_w1_a": "normal(std=0.1)", "hada_w1_b": "normal(std=1)", "hada_w2_a": "zeros",
             "hada_w2_b": "normal(std=1)", "hada_t1": "normal(std=0.1)", "hada_t2": "normal(std=0.1)"},
    "lokr": {"lokr_w1": KAIMING, "lokr_w1_a": KAIMING, "lokr_w1_b": KAIMING, "lokr_w2": "zeros",
             "lokr_w2_a": KAIMING, "lokr_w2_b": "zeros", "lokr_t2": KAIMING},
}
DORA_INIT = "norm of the base weight over every axis but the magnitude axis (0 when wd_on_out, else 1)"
# The tensor the update is linear in: scaling it sets the update's size.
LINEAR_IN = {"locon": ["lora_up.weight"], "loha": ["hada_w2_a"], "lokr": ["lokr_w1", "lokr_w1_a"]}


def case(name, algo, layer, dim, alpha, file, **kw):
    return {"name": name, "algo": algo, "layer": layer, "dim": dim, "alpha": alpha, "file": file,
            "kwargs": kw}


LIN = {"kind": "linear", "in": 32, "out": 48, "bias": True}
LIN_S = {"kind": "linear", "in": 16, "out": 24, "bias": True}
CONV = {"kind": "conv2d", "in": 8, "out": 12, "k": 3, "stride": 1, "pad": 1, "bias": True}
CONV_S2 = {"kind": "conv2d", "in": 8, "out": 12, "k": 3, "stride": 2, "pad": 1, "bias": True}
CONV1 = {"kind": "conv2d", "in": 16, "out": 24, "k": 1, "stride": 1, "pad": 0, "bias": True}

CASES = [
    case("loha_linear", "loha", LIN, 4, 2.0, "loha", multipliers=[0.5]),
    case("loha_linear_alpha_none", "loha", LIN_S, 4, None, "loha"),
    case("loha_conv3x3", "loha", CONV, 4, 2.0, "loha"),
    case("loha_conv3x3_tucker", "loha", CONV, 4, 2.0, "loha", use_tucker=True),
    case("loha_conv1x1", "loha", CONV1, 4, 2.0, "loha", use_tucker=True),
    case("loha_linear_dora", "loha", LIN, 4, 2.0, "loha", weight_decompose=True),
    case("lokr_linear_f-1_dim4_full", "lokr", LIN, 4, 2.0, "lokr", factor=-1),
    case("lokr_linear_f-1_dim2", "lokr", LIN, 2, 1.0, "lokr", factor=-1),
    case("lokr_linear_f4_dim4", "lokr", LIN, 4, 2.0, "lokr", factor=4),
    case("lokr_linear_f-1_dim2_decompose_both", "lokr", LIN, 2, 1.0, "lokr", factor=-1,
         decompose_both=True),
    case("lokr_linear_f4_dim4_dora", "lokr", LIN, 4, 2.0, "lokr", factor=4, weight_decompose=True),
    case("lokr_conv3x3_f2_dim2", "lokr", CONV_S2, 2, 1.0, "lokr", factor=2),
    case("lokr_conv3x3_f2_dim2_tucker", "lokr", CONV_S2, 2, 1.0, "lokr", factor=2, use_tucker=True),
    case("lokr_conv3x3_f2_dim4_full", "lokr", CONV_S2, 4, 2.0, "lokr", factor=2),
    case("lokr_conv1x1_f-1_dim2", "lokr", CONV1, 2, 1.0, "lokr", factor=-1),
    case("locon_linear", "locon", LIN_S, 4, 2.0, "dora"),
    case("locon_linear_dora", "locon", LIN_S, 4, 2.0, "dora", weight_decompose=True,
         multipliers=[0.5]),
    case("locon_linear_dora_in", "locon", LIN_S, 4, 2.0, "dora", weight_decompose=True,
         wd_on_out=False, multipliers=[0.5]),
    case("locon_conv3x3_dora", "locon", CONV, 4, 2.0, "dora", weight_decompose=True),
    case("locon_conv3x3_dora_in", "locon", CONV, 4, 2.0, "dora", weight_decompose=True,
         wd_on_out=False),
]


def load_lycoris(root):
    sys.path.insert(0, root)
    from lycoris.functional.general import factorization
    from lycoris.modules.locon import LoConModule
    from lycoris.modules.loha import LohaModule
    from lycoris.modules.lokr import LokrModule

    return {"locon": LoConModule, "loha": LohaModule, "lokr": LokrModule}, factorization


def make_layer(spec, gen):
    if spec["kind"] == "linear":
        layer = torch.nn.Linear(spec["in"], spec["out"], bias=spec["bias"])
    else:
        layer = torch.nn.Conv2d(spec["in"], spec["out"], spec["k"], spec["stride"], spec["pad"],
                                bias=spec["bias"])
    fan_in = layer.weight[0].numel()
    with torch.no_grad():
        layer.weight.copy_(torch.randn(layer.weight.shape, generator=gen) / math.sqrt(fan_in))
        if layer.bias is not None:
            layer.bias.copy_(0.1 * torch.randn(layer.bias.shape, generator=gen))
    return layer


def make_input(spec, gen):
    shape = (4, spec["in"]) if spec["kind"] == "linear" else (1, spec["in"], 6, 6)
    return torch.randn(shape, generator=gen)


def apply_layer(spec, x, weight, bias):
    if spec["kind"] == "linear":
        return F.linear(x, weight, bias)
    return F.conv2d(x, weight, bias, spec["stride"], spec["pad"])


def forward_weight(m, multiplier):
    """The weight LyCORIS's forward() applies: base + update (or DoRA of it), from its own methods."""
    base = m._current_weight()
    if hasattr(m, "make_weight"):  # LoConModule: make_weight() is unscaled
        diff = m.make_weight().to(base.dtype) * m.scale
    else:  # LoHa / LoKr: get_weight() already carries the scale
        diff = m.get_weight(m.shape).to(base.dtype) * m.scalar
    if m.wd:
        return m.apply_weight_decompose(base + diff, multiplier)
    return base + diff * multiplier


def tensor_stats(t):
    t = t.detach().double()
    return {"shape": list(t.shape), "zero": bool((t == 0).all()), "mean": round(t.mean().item(), 6),
            "std": round(t.std().item(), 6) if t.numel() > 1 else 0.0,
            "min": round(t.min().item(), 6), "max": round(t.max().item(), 6)}


def check_init(algo, name, t):
    rule = INIT_RULES[algo][name]
    if rule == "zeros":
        assert (t == 0).all(), name
    elif rule == KAIMING:
        bound = 1.0 / math.sqrt(t[0].numel())
        assert t.abs().max() <= bound and t.abs().max() > 0.5 * bound, name
    else:
        std = float(rule.split("=")[1].rstrip(")"))
        assert t.numel() < 64 or abs(t.std().item() / std - 1) < 0.35, (name, t.std())
    return rule


def set_values(m, algo, base_weight, gen):
    """Seeded values for every adapter tensor, the update scaled to half the base weight's rms."""
    params = dict(m.named_parameters())
    with torch.no_grad():
        for name, p in params.items():
            if name == "dora_scale":
                p.mul_(1 + 0.2 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen))
        m.wd, wd = False, m.wd
        diff = forward_weight(m, 1.0) - base_weight
        m.wd = wd
        ratio = 0.5 * base_weight.pow(2).mean().sqrt() / diff.pow(2).mean().sqrt()
        next(params[n] for n in LINEAR_IN[algo] if n in params).mul_(ratio)


def build(classes, c, layer, multiplier=1.0):
    kw = {k: v for k, v in c["kwargs"].items() if k != "multipliers"}
    return classes[c["algo"]](c["name"], layer, multiplier, c["dim"], c["alpha"], **kw)


def init_facts(m, c, layer, factorization):
    """LyCORIS's init of the module (checked against INIT_RULES), scale, saved alpha, LoKr's shapes."""
    spec, algo, factor = c["layer"], c["algo"], c["kwargs"].get("factor", -1)
    info = {"algo": algo, "lycoris_class": type(m).__name__, "layer": spec, "dim": c["dim"],
            "alpha_arg": c["alpha"], "kwargs": c["kwargs"], "scale": float(m.scale),
            "alpha_saved": float(m.alpha), "tucker": bool(m.tucker), "init": {}}
    for name, p in m.named_parameters():
        rule = DORA_INIT if name == "dora_scale" else check_init(algo, name, p.detach())
        info["init"][name] = {"rule": rule, **tensor_stats(p)}
    if m.wd:
        w = layer.weight.detach()
        axis = w if m.wd_on_out else w.transpose(0, 1)
        assert torch.allclose(m.dora_scale.flatten(), axis.reshape(axis.shape[0], -1).norm(dim=1))
        info["wd_on_out"] = bool(m.wd_on_out)
    if algo == "lokr":
        info["lokr"] = {"use_w1": bool(m.use_w1), "use_w2": bool(m.use_w2), "factor": factor,
                        "factorization_out": list(factorization(spec["out"], factor)),
                        "factorization_in": list(factorization(spec["in"], factor))}
    return info


def fp64_copy(classes, c, layer, m):
    layer64 = copy.deepcopy(layer).double()
    m64 = build(classes, c, layer64).double()
    with torch.no_grad():
        for name, p in m64.named_parameters():
            p.copy_(m.get_parameter(name).double())
    return layer64, m64


def lycoris_merge_relation(m64, algo, base, merged, lyco):
    """How LyCORIS's get_merged_weight (merge_to, its merge tool) relates to the weight forward applies."""
    if (lyco - merged).abs().max().item() <= 1e-12:
        return "same as forward"
    assert algo != "locon"
    if not m64.wd:
        # get_diff_weight multiplies get_weight(), which already holds the scale, by the scale again.
        assert (lyco - (base + m64.scale * (merged - base))).abs().max() < 1e-12
        return "base + scale * (forward weight - base)"
    update = m64.get_weight(m64.shape) * m64.scalar
    assert (lyco - m64.apply_weight_decompose(base + m64.scale * update)).abs().max() < 1e-12
    return "DoRA of (base + scale * forward update)"


def run_case(classes, factorization, c, seed):
    gen = torch.Generator().manual_seed(seed)
    spec, algo = c["layer"], c["algo"]
    layer = make_layer(spec, gen)
    torch.manual_seed(seed)
    m = build(classes, c, layer)
    info = init_facts(m, c, layer, factorization)
    out = {"base.weight": layer.weight.detach().clone(), "base.bias": layer.bias.detach().clone()}
    if m.wd:
        out["init.dora_scale"] = m.dora_scale.detach().clone()
    set_values(m, algo, layer.weight.detach(), gen)
    file_tensors = {k: v.detach().clone().contiguous() for k, v in m.custom_state_dict().items()}
    info["file_tensors"] = {k: list(v.shape) for k, v in file_tensors.items()}
    out.update({f"param.{k}": v for k, v in file_tensors.items()})
    out["x"] = x = make_input(spec, gen)
    with torch.no_grad():
        out["y"] = y32 = m.forward(x)

    layer64, m64 = fp64_copy(classes, c, layer, m)
    x64 = x.double().requires_grad_(True)
    y64 = m64.forward(x64)
    out["gy"] = gy = torch.randn(y64.shape, generator=gen)
    (y64 * gy.double()).sum().backward()
    out["grad.x"] = x64.grad.float()
    y64, x64 = y64.detach(), x64.detach()
    with torch.no_grad():
        merged = forward_weight(m64, 1.0)
        lyco = m64.get_merged_weight(1.0, layer64.weight.shape, layer64.weight.device)[0]  # as merge_to
    # fp64 results are stored rounded to fp32 (the correctly rounded value), y also as LyCORIS's fp32 run.
    out.update({"y_f64": y64, "merged": merged.float()})
    for name, p in m64.named_parameters():
        out[f"grad.{name}"] = p.grad.detach().float()

    base_y = apply_layer(spec, x64, layer64.weight, layer64.bias)
    residual = (y64 - apply_layer(spec, x64, merged, layer64.bias)).abs().max().item()
    assert residual < 1e-12 * y64.abs().max().item() + 1e-13, (c["name"], residual)
    rel32 = ((y32.double() - y64).abs().max() / y64.abs().max()).item()
    assert rel32 < 1e-5, (c["name"], rel32)
    change = ((y64 - base_y).pow(2).mean() / base_y.pow(2).mean()).sqrt().item()
    assert change > 0.05, (c["name"], change)
    info["checks"] = {"max_abs_y_f64_minus_op_x_merged": residual, "rel_y_f32_vs_f64": rel32,
                      "rel_rms_update_of_y": round(change, 6),
                      "max_abs_get_merged_weight_minus_forward_weight": (lyco - merged).abs().max().item(),
                      "get_merged_weight_is": lycoris_merge_relation(m64, algo, layer64.weight, merged, lyco)}
    for mult in c["kwargs"].get("multipliers", []):
        m64.multiplier = mult
        with torch.no_grad():
            ym, wm = m64.forward(x64), forward_weight(m64, mult)
        assert (ym - apply_layer(spec, x64, wm, layer64.bias)).abs().max() < 1e-12
        out[f"m{mult}.y"] = ym.float()
        if m64.wd:  # without DoRA the weight is base + multiplier * update
            out[f"m{mult}.merged"] = wm.float()
    info["tensors"] = {k: list(v.shape) for k, v in out.items()}
    return info, out


def write_cases(classes, factorization):
    files, infos = {}, {}
    for i, c in enumerate(CASES):
        info, tensors = run_case(classes, factorization, c, 1000 + i)
        infos[c["name"]] = {"file": c["file"] + ".safetensors", **info}
        store = files.setdefault(c["file"], {})
        for k, v in tensors.items():
            store[f"{c['name']}.{k}"] = v.detach().contiguous()
    for name, tensors in files.items():
        save_file(tensors, os.path.join(OUT, name + ".safetensors"), {"source": "make_lycoris_golden.py"})
    return infos


def factorization_table(factorization):
    dims = [4, 8, 12, 16, 24, 32, 48, 127, 128, 250, 320, 360, 512, 640, 768, 960, 1024, 1280, 1920,
            2560, 3072, 5120, 10240]
    return {str(d): {str(f): list(factorization(d, f)) for f in (-1, 1, 2, 4, 8, 16, 32)} for d in dims}


def to_json(obj, level=0):
    """Indented JSON whose objects below the fourth level, and lists of plain values, sit on one line."""
    plain = isinstance(obj, list) and not any(isinstance(v, (dict, list)) for v in obj)
    if level >= 4 or plain or not isinstance(obj, (dict, list)) or not obj:
        return json.dumps(obj, sort_keys=True)
    pad = " " * (level + 1)
    if isinstance(obj, dict):
        items = [f"{pad}{json.dumps(k)}: {to_json(obj[k], level + 1)}" for k in sorted(obj)]
        return "{\n" + ",\n".join(items) + "\n" + " " * level + "}"
    return "[\n" + ",\n".join(pad + to_json(v, level + 1) for v in obj) + "\n" + " " * level + "]"


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        f.write(to_json(obj) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lycoris", default="/work/ref/LyCORIS")
    ap.add_argument("--sd-scripts", default="/work/ref/sd-scripts")
    args = ap.parse_args()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    os.makedirs(OUT, exist_ok=True)
    classes, factorization = load_lycoris(args.lycoris)
    infos = write_cases(classes, factorization)
    write_json(os.path.join(OUT, "cases.json"), {
        "lycoris": os.path.abspath(args.lycoris), "torch": torch.__version__,
        "tensor_names": "<case>.<name>: base.weight, base.bias, x, param.<key in a LyCORIS file>, "
                        "init.dora_scale (LyCORIS's init), y (LyCORIS's fp32 forward), y_f64 (its fp64 "
                        "forward), merged (the weight its forward applies), gy, grad.<parameter or x> (of "
                        "sum(y * gy)), m<multiplier>.y (and .merged with DoRA); merged, grad.* and m*.* "
                        "are LyCORIS's fp64 results rounded to fp32",
        "cases": infos, "factorization": factorization_table(factorization)})
    import lycoris_kohya_files

    lycoris_kohya_files.write_all(args.lycoris, args.sd_scripts, OUT, write_json, set_values, forward_weight)


if __name__ == "__main__":
    main()
