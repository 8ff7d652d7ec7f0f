#!/usr/bin/env python3
"""Golden data for tests/test_weighted_captions.cpp: kohya's weighted captions (--weighted_captions)
as sd-scripts' train_network.py runs them for SD1.x: library/strategy_base.py's TokenizeStrategy
(_get_weighted_input_ids with its nested parse_prompt_attention, _get_input_ids) and
library/strategy_sd.py's SdTokenizeStrategy.tokenize_with_weights and
SdTextEncodingStrategy.encode_tokens / encode_tokens_with_weights, taken from sd-scripts' own source
and run here as they are (the four classes compiled alone, without their modules' imports; the
tokenizer set on the object instead of loaded from the hub).

Writes tests/golden/data/kohya/weighted/:
  parse.json     caption -> parse_prompt_attention's [text, weight] pairs (weights as Python's
                 doubles); `errors`: captions on which kohya's float() raises
  ids.json       the CLIP vocabulary (models/sd15/data/clip_merges.txt, as make_tokenizer_golden.py
                 builds vocab.json): per caption and max_token_length (None, 150, 225) the ids
                 [n, 77] and weights [n, 77] tokenize_with_weights gives
  clip.safetensors  a tiny CLIPTextModel (tests/golden/data/tokenizer/tiny's 3514 tokens, hidden 16,
                 2 layers; random weights rounded to f16 and stored so), and per max_token_length and
                 clip_skip a batch of captions through encode_tokens_with_weights:
                 out_<mtl>_skip<k> [B, rows, 16] (mtl: 75 for None); clip.json lists the captions.
Run with the golden venv: ~/venv-golden/bin/python tests/golden/make_kohya_weighted_captions.py [sd-scripts]
Deterministic (seeded, CPU).
"""
import __future__
import ast
import importlib.util
import json
import logging
import os
import pathlib
import re
import sys
import tempfile
import typing

import torch
from safetensors.torch import save_file
from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

SD_SCRIPTS = sys.argv[1] if len(sys.argv) > 1 else "/work/ref/sd-scripts"
HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
OUT = HERE / "data" / "kohya" / "weighted"
TINY = HERE / "data" / "tokenizer" / "tiny"


def kohya_classes():
    """strategy_base's TokenizeStrategy / TextEncodingStrategy and strategy_sd's Sd* strategies."""
    ns = {"os": os, "re": re, "torch": torch, "np": None, "CLIPTokenizer": CLIPTokenizer,
          "logger": logging.getLogger("kohya"), "train_util": None}
    for k in ("Any", "List", "Optional", "Tuple", "Union", "Callable"):
        ns[k] = getattr(typing, k)
    for file, names in (("strategy_base.py", ("TokenizeStrategy", "TextEncodingStrategy")),
                        ("strategy_sd.py", ("SdTokenizeStrategy", "SdTextEncodingStrategy"))):
        path = os.path.join(SD_SCRIPTS, "library", file)
        src = open(path, encoding="utf-8").read()
        for node in ast.parse(src).body:
            if isinstance(node, ast.ClassDef) and node.name in names:
                code = ast.get_source_segment(src, node)
                exec(compile(code, path, "exec", flags=__future__.annotations.compiler_flag), ns)
    return ns


def nested_function(cls, method, name):
    """A function defined inside cls.method, compiled alone (kohya's parse_prompt_attention)."""
    path = os.path.join(SD_SCRIPTS, "library", "strategy_base.py")
    src = open(path, encoding="utf-8").read()
    holder = next(n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.FunctionDef) and n.name == method)
    fn = next(n for n in ast.walk(holder) if isinstance(n, ast.FunctionDef) and n.name == name)
    lines = ast.get_source_segment(src, fn, padded=True).split("\n")
    pad = min(len(l) - len(l.lstrip()) for l in lines if l.strip())
    ns = {"TokenizeStrategy": cls}
    exec(compile("\n".join(l[pad:] for l in lines), path, "exec"), ns)
    return ns[name]


def tokenize_strategy(ns, tokenizer, max_token_length):
    s = ns["SdTokenizeStrategy"].__new__(ns["SdTokenizeStrategy"])  # __init__ loads from the hub
    s.tokenizer = tokenizer
    s.max_length = tokenizer.model_max_length if max_token_length is None else max_token_length + 2
    return s


def full_tokenizer(folder):
    spec = importlib.util.spec_from_file_location("make_tokenizer_golden", HERE / "make_tokenizer_golden.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    text = (ROOT / "models" / "sd15" / "data" / "clip_merges.txt").read_text(encoding="utf-8")
    merges = [l for l in text.split("\n")[1:] if l]
    mod.write_folder(folder, merges)
    return CLIPTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"), model_max_length=77)


WORDS = ("a photo of the cat dog red blue green house tree river mountain night light dark old young city "
         "street rain snow sky cloud sun moon star flower garden castle ocean beach forest").split()


def long_caption(seed, n_words, weighted_every=5):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n_words):
        w = WORDS[int(torch.randint(len(WORDS), (1,), generator=g))]
        r = int(torch.randint(6, (1,), generator=g))
        if i % weighted_every == 0 and r == 0:
            w = f"({w}:{1 + int(torch.randint(20, (1,), generator=g)) / 10})"
        elif i % weighted_every == 0 and r == 1:
            w = f"[{w}]"
        elif i % weighted_every == 0 and r == 2:
            w = f"(({w}))"
        out.append(w)
    return ", ".join(out)


CAPTIONS = [
    # kohya's own docstring examples
    "normal text", "an (important) word", "(unbalanced", "\\(literal\\]", "(unnecessary)(parens)",
    "a (((house:1.3)) [on] a (hill:0.5), sun, (((sky))).",
    # brackets, weights, escapes
    "(masterpiece:1.2), (best quality:1.4), [bad hands], {extra}", "((((very emphasized))))",
    "[[[[de-emphasized]]]]", "a (b:0.5) c", "(a:-1.5) b", "(a:+2) b", "(a:1.) (b:.5)", "(a:00001.5000) b",
    "(a:999999) b", "(a:0) b", "(a:1e3) b", "(a:-) b", "(a:b) c", "a:b c", ":1.2) x", "x :1.2) (y:1.3)",
    "a \\ b", "a \\\\ b", "\\", "\\\\(x\\\\)", "(", ")", "[", "]", "", "()", "[]", "(:1.5)", "( :1.5) z",
    "x]y)z", "[a (b] c)", "(a [b) c]", "((a) b:1.5)", "[a:1.5] b", "(a:1.5] b", "[(a:2)] (b)",
    "super(man) and bat[man]", "1girl, solo, (masterpiece:1.2), best quality, BREAK, outdoors",
    "café (crème brûlée:1.3), [naïve]", "(日本語:1.2) テキスト", "a <|endoftext|> (b:1.2)", "tab\t(here:1.1)",
    "  (spaced  out : 1.2)  ", "(a:1.1) (b:1.1) c",
    # long: two and three chunks, and past 225 (truncated)
    long_caption(1, 30), long_caption(2, 60), long_caption(3, 110), long_caption(4, 200),
    "(" + long_caption(5, 90) + ":0.8)",
]
ERRORS = ["(a:1.2.3) b", "(a:.) b", "(a:..) b", "x (y:+.)", "((a:1..5))"]


def main():
    ns = kohya_classes()
    parse = nested_function(ns["TokenizeStrategy"], "_get_weighted_input_ids", "parse_prompt_attention")
    OUT.mkdir(parents=True, exist_ok=True)

    parsed = {"cases": [{"caption": c, "pieces": parse(c)} for c in CAPTIONS], "errors": []}
    for c in ERRORS:
        try:
            parse(c)
        except ValueError:
            parsed["errors"].append(c)
    assert parsed["errors"] == ERRORS
    lines = ",\n".join(json.dumps(c, ensure_ascii=False) for c in parsed["cases"])
    (OUT / "parse.json").write_text(f'{{"cases": [\n{lines}\n],\n"errors": {json.dumps(parsed["errors"])}}}\n',
                                    encoding="utf-8")

    with tempfile.TemporaryDirectory() as d:
        tok = full_tokenizer(pathlib.Path(d))
        cases = []
        for mtl in (None, 150, 225):
            s = tokenize_strategy(ns, tok, mtl)
            for c in CAPTIONS:
                ids, w = s.tokenize_with_weights(c)
                cases.append({"caption": c, "max_token_length": mtl or 75, "ids": ids[0][0].reshape(-1).tolist(),
                              "weights": w[0][0].reshape(-1).tolist()})
    (OUT / "ids.json").write_text(json.dumps({"cases": cases}, ensure_ascii=False, separators=(",", ":")) + "\n",
                                  encoding="utf-8")

    tiny = CLIPTokenizer(str(TINY / "vocab.json"), str(TINY / "merges.txt"), model_max_length=77)
    cfg = CLIPTextConfig(vocab_size=len(tiny), hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, max_position_embeddings=77, hidden_act="quick_gelu",
                         layer_norm_eps=1e-5, bos_token_id=tiny.bos_token_id, eos_token_id=tiny.eos_token_id,
                         pad_token_id=tiny.pad_token_id)
    torch.manual_seed(0)
    model = CLIPTextModel(cfg).eval()
    g = torch.Generator().manual_seed(1)
    tensors = {}
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "layer_norm" in name:
                v = (1.0 if name.endswith("weight") else 0.0) + 0.2 * torch.randn(p.shape, generator=g)
            elif "embedding" in name:
                v = 0.5 * torch.randn(p.shape, generator=g)
            elif name.endswith("weight"):
                v = torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5
            else:
                v = 0.1 * torch.randn(p.shape, generator=g)
            p.copy_(v.half().float())  # the stored f16 values exactly
            key = name if name.startswith("text_model.") else "text_model." + name
            tensors[key] = p.detach().half().contiguous()
    if not hasattr(model, "text_model"):  # transformers 5 flattened the model; kohya names text_model
        object.__setattr__(model, "text_model", model)
    batch = [CAPTIONS[5], CAPTIONS[6], CAPTIONS[-4], CAPTIONS[-1]]
    with torch.no_grad():
        for mtl in (None, 225):
            s = tokenize_strategy(ns, tiny, mtl)
            for skip in (None, 2):
                enc = ns["SdTextEncodingStrategy"](clip_skip=skip)
                ids, w = s.tokenize_with_weights(batch)
                out = enc.encode_tokens_with_weights(s, [model], ids, w)[0]
                tensors[f"out_{mtl or 75}_skip{skip or 1}"] = out.float().contiguous()
    save_file(tensors, str(OUT / "clip.safetensors"))
    (OUT / "clip.json").write_text(json.dumps({"captions": batch}, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
