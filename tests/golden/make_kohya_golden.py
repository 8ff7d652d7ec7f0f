#!/usr/bin/env python3
"""LoRA metadata as kohya sd-scripts writes it, for tests/test_kohya_metadata.cpp
(tests/golden/data/kohya/), made by sd-scripts' own functions.

Run with the golden venv and an sd-scripts checkout (the `fetch` tool brings kohya-ss/sd-scripts):
  /work/venv-golden/bin/python tests/golden/make_kohya_golden.py --sd-scripts /path/to/sd-scripts

1. hashes_<case>.safetensors: a kohya-named LoRA state dict; hashes.json: per case, the metadata
   given with it and what library/train_util.py's precalculate_safetensors_hashes makes of both
   (sshs_model_hash, sshs_legacy_hash: sha256 of the data area, and of the bytes [1 MiB, 1 MiB +
   64 KiB) of the file safetensors' Python package writes with only the ss_* metadata). "big"
   (fp16, 1.3 MiB, metadata with quotes, newlines and non-ASCII) puts the legacy window on tensor
   bytes; "mixed" (f32, bf16, fp16, under 1 MiB) checks the tensor order across dtypes and the
   hash of an empty window. (The metadata stays out of the .safetensors files: the package writes
   it in a random order, and the files would change on every run.)
2. modelspec.json: library/sai_model_spec.py's build_metadata for an SD1.x LoRA (v2, v-param,
   SDXL off) per case of resolution and clip_skip, as the training scripts call it.
Values are periodic ramps: the hashes need exact bytes, not randomness, and git stores them small.
sd-scripts is imported as it is, except that torchvision (needed only by image helpers the
metadata functions never call) is stood in for when it is not installed, and train_util's three
hash functions are taken from its source (importing train_util pulls in the whole trainer).
The output is deterministic: the same bytes on every run.
"""
import argparse
import ast
import hashlib
import json
import os
import sys
import types
from io import BytesIO

import safetensors
import safetensors.torch
import torch
from safetensors.torch import save_file

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "kohya")


def load_sd_scripts(root):
    sys.path.insert(0, root)
    import diffusers  # noqa: F401  (before the stand-in below, so diffusers sees no torchvision)
    import diffusers.schedulers.scheduling_euler_ancestral_discrete  # noqa: F401

    try:
        import torchvision  # noqa: F401
    except ImportError:
        class Dummy:
            def __getattr__(self, name):
                return Dummy

        stand_in = types.ModuleType("torchvision")
        stand_in.transforms = Dummy()
        sys.modules["torchvision"] = stand_in
    from library import sai_model_spec

    source = open(os.path.join(root, "library", "train_util.py"), encoding="utf-8").read()
    wanted = {"precalculate_safetensors_hashes", "addnet_hash_legacy", "addnet_hash_safetensors"}
    body = [n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name in wanted]
    assert len(body) == 3, "sd-scripts' train_util no longer has the three hash functions"
    ns = {"hashlib": hashlib, "BytesIO": BytesIO, "safetensors": safetensors}
    exec(compile(ast.Module(body=body, type_ignores=[]), "train_util.py", "exec"), ns)
    return sai_model_spec, ns["precalculate_safetensors_hashes"]


def ramp(n, dtype, shape, period=251):
    return ((torch.arange(n) % period).to(torch.float64) / period - 0.5).to(dtype).reshape(shape)


def lora_state_dict(modules, dtype):
    sd = {}
    for key, (out_f, in_f, rank) in modules.items():
        sd[key + ".lora_down.weight"] = ramp(rank * in_f, dtype, (rank, in_f))
        sd[key + ".lora_up.weight"] = ramp(out_f * rank, dtype, (out_f, rank), period=97)
        sd[key + ".alpha"] = torch.tensor(rank / 2, dtype=dtype)
    return sd


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sd-scripts", required=True)
    args = ap.parse_args()
    sai_model_spec, precalculate = load_sd_scripts(args.sd_scripts)
    os.makedirs(OUT, exist_ok=True)

    big_modules = {f"lora_unet_down_blocks_{b}_attentions_0_transformer_blocks_0_attn1_to_{p}": (640, 640, 128)
                   for b in range(2) for p in "qk"}
    cases = {
        "big": (lora_state_dict(big_modules, torch.float16),
                {"ss_network_dim": "128", "ss_output_name": "caf\u00e9 \u2713",
                 "ss_tag_frequency": json.dumps({"1_a \"b\"": {"x\ny": 2, "\u00fc": 1}}, ensure_ascii=False),
                 "ss_training_comment": "line 1\nline 2\ttab \\ back\x01slash", "modelspec.title": "not hashed",
                 "other": "not hashed"}),
        "mixed": ({"lora_te_a.lora_down.weight": ramp(12, torch.float32, (3, 4)),
                   "lora_te_b.lora_up.weight": ramp(6, torch.bfloat16, (2, 3)),
                   "lora_te_a.alpha": torch.tensor(3.0, dtype=torch.float16),
                   "lora_te_c.lora_down.weight": ramp(5, torch.float16, (5,))},
                  {"ss_network_dim": "3"}),
    }
    hashes = {}
    for name, (sd, metadata) in cases.items():
        model_hash, legacy_hash = precalculate(sd, metadata)
        hashes[name] = {"metadata": metadata, "sshs_model_hash": model_hash, "sshs_legacy_hash": legacy_hash}
        path = os.path.join(OUT, f"hashes_{name}.safetensors")
        save_file(sd, path)
        print(f"{path}: {os.path.getsize(path)} bytes, sshs {model_hash[:12]}... / {legacy_hash}")
    with open(os.path.join(OUT, "hashes.json"), "w", encoding="utf-8") as f:
        json.dump(hashes, f, indent=1, ensure_ascii=False)
        f.write("\n")

    spec = []
    for reso, clip_skip in [((512, 512), None), ((768, 512), 2)]:
        md = sai_model_spec.build_metadata(None, False, False, False, True, False, 1700000000.0, title="my_lora",
                                           reso=reso, clip_skip=clip_skip)
        spec.append({"resolution": list(reso), "clip_skip": clip_skip, "metadata": dict(sorted(md.items()))})
    with open(os.path.join(OUT, "modelspec.json"), "w", encoding="utf-8") as f:
        json.dump(spec, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"modelspec.json: {len(spec)} cases")


if __name__ == "__main__":
    main()
