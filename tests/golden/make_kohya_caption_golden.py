#!/usr/bin/env python3
"""kohya's caption rules for wildcards and token warm-up (library/train_util.py: BaseDataset's
process_caption and DreamBoothDataset's read_caption, taken from sd-scripts' own source and run
here as they are, without the rest of train_util's imports), for data/caption.h:
  read:     caption file text -> what read_caption returns, with and without enable_wildcard;
  wildcard: a caption (prefix / suffix) -> every caption process_caption draws for it (the set over
            many seeds of Python's random, so the C++ side, with its own generator, is compared by
            the set);
  warmup:   token_warmup_min / token_warmup_step / keep_tokens / max_train_steps and a step ->
            the caption (no shuffle: deterministic).
Writes tests/golden/data/kohya/captions.json. Deterministic.

  ~/venv-golden/bin/python tests/golden/make_kohya_caption_golden.py [sd-scripts folder]
"""
import __future__
import ast
import json
import math
import os
import random
import re
import sys
import tempfile
import types

SD_SCRIPTS = sys.argv[1] if len(sys.argv) > 1 else "/work/ref/sd-scripts"
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "kohya", "captions.json")


def dedent(src):
    lines = src.split("\n")
    pad = min(len(l) - len(l.lstrip()) for l in lines if l.strip())
    return "\n".join(l[pad:] for l in lines)


def kohya_function_dedented(path, owner, name):
    """The function `name` defined in `owner` (a class, or a function nested in it), compiled alone."""
    src = open(path, encoding="utf-8").read()
    tree = ast.parse(src)
    holder = next(n for n in ast.walk(tree) if isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name == owner)
    fn = next(n for n in ast.walk(holder) if isinstance(n, ast.FunctionDef) and n.name == name)
    seg = " " * fn.col_offset + ast.get_source_segment(src, fn)
    ns = {"random": random, "re": re, "math": math, "os": os, "logger": None}
    # kohya's annotations name its classes: left unevaluated, as `from __future__ import annotations` does
    exec(compile(dedent(seg), path, "exec", flags=__future__.annotations.compiler_flag), ns)
    return ns[name]


def subset(**kw):
    s = dict(caption_prefix=None, caption_suffix=None, caption_dropout_rate=0, caption_dropout_every_n_epochs=0,
             enable_wildcard=False, shuffle_caption=False, token_warmup_step=0, token_warmup_min=1,
             caption_tag_dropout_rate=0, keep_tokens_separator="", keep_tokens=0, caption_separator=",",
             secondary_separator=None)
    s.update(kw)
    return types.SimpleNamespace(**s)


def dataset(step=0, max_train_steps=0):
    return types.SimpleNamespace(current_epoch=1, current_step=step, max_train_steps=max_train_steps, replacements={})


def main():
    train_util = os.path.join(SD_SCRIPTS, "library", "train_util.py")
    process_caption = kohya_function_dedented(train_util, "BaseDataset", "process_caption")
    read_caption = kohya_function_dedented(train_util, "DreamBoothDataset", "read_caption")
    out = {"read": [], "wildcard": [], "warmup": []}

    with tempfile.TemporaryDirectory() as d:
        for text in ["one line\n", "first, a\nsecond, b\n", "  padded  \n\n\n  third \n", "a\r\nb\r\n", "x\n\ny",
                     "  \nonly after a blank\n", "{a|b}, c\n{d|e}\n"]:
            with open(os.path.join(d, "img.txt"), "w", encoding="utf-8", newline="") as f:
                f.write(text)
            entry = {"text": text}
            for wild in (False, True):
                entry["wildcard" if wild else "plain"] = read_caption(os.path.join(d, "img.png"), ".txt", wild)
            out["read"].append(entry)

    wild_cases = [
        ("{red|green|blue} car", None, None),
        ("a {b|c} and {d|e}", None, None),
        ("{{literal}} and {x|y}", None, None),
        ("{{{a|b}}}", None, None),
        ("{} and {|x} and {a||b}", None, None),
        ("{a{b|c}", None, None),
        ("unclosed {a|b", None, None),
        ("closed} {a|b}}", None, None),
        ("line one {a|b}\nline two\nline three {c|d}", None, None),
        ("first\nsecond", "pre", "post"),
        ("\u2985{a|b}\u2986", None, None),
        ("{ a | b }", None, None),
    ]
    for caption, prefix, suffix in wild_cases:
        seen = set()
        for seed in range(400):
            random.seed(seed)
            seen.add(process_caption(dataset(), subset(enable_wildcard=True, caption_prefix=prefix,
                                                       caption_suffix=suffix), caption))
        plain = process_caption(dataset(), subset(caption_prefix=prefix, caption_suffix=suffix), caption)
        out["wildcard"].append({"caption": caption, "prefix": prefix, "suffix": suffix, "draws": sorted(seen),
                                "plain": plain})

    warm_cases = [
        # caption, token_warmup_min, token_warmup_step, keep_tokens, max_train_steps
        ("a, b, c, d, e, f, g, h", 1, 10, 0, 100),
        ("a, b, c, d, e, f, g, h", 3, 7, 0, 100),
        ("k1, k2, a, b, c, d, e", 1, 10, 2, 100),
        ("a, b, c, d, e, f, g, h", 1, 0.25, 0, 40),
        ("a, b, c, d, e, f, g, h", 2, 0.1, 0, 33),
        ("a, b", 5, 10, 0, 100),
        ("a,b,,c", 0, 4, 0, 100),
        ("solo", 1, 0.001, 0, 100),  # rounds to 0 steps: off, the caption as it is
        ("x ||| a, b, c, d ||| z", 1, 6, 0, 100),
    ]
    for caption, wmin, wstep, keep, total in warm_cases:
        for step in [0, 1, 2, 3, 5, 6, 7, 9, 10, 11, 50]:
            s = subset(token_warmup_min=wmin, token_warmup_step=wstep, keep_tokens=keep,
                       keep_tokens_separator="|||" if "|||" in caption else "")
            got = process_caption(dataset(step, total), s, caption)
            out["warmup"].append({"caption": caption, "min": wmin, "step": wstep, "keep_tokens": keep,
                                  "max_train_steps": total, "at": step, "out": got})

    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
