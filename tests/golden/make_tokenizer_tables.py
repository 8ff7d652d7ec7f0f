#!/usr/bin/env python3
"""Generates models/sd15/data/clip_unicode.inc: the Unicode tables the C++ CLIP tokenizer needs.

The reference is transformers' CLIPTokenizer (transformers >= 5 builds it on HF `tokenizers`):
    normalizer    NFC, then every run of \\s becomes one space, then lower-case (per character)
    pre-tokenizer the CLIP regex  's|'t|'re|'ve|'m|'ll|'d|[\\p{L}]+|[\\p{N}]|[^\\s\\p{L}\\p{N}]+
                  (Oniguruma classes), then byte-level mapping.
The Unicode data compiled into `tokenizers` is not the one of Python's unicodedata (its NFD lacks
U+11938's decomposition, its lower-casing differs on 55 characters), so every table is measured on
the `tokenizers` objects themselves; unicodedata only supplies what they do not expose (the raw
two-character canonical mappings and combining classes), and only where the measured behaviour
agrees. The script then checks its own NFC model (the algorithm the C++ code implements) against
`tokenizers` on every character and on many random sequences, and stops if anything differs.

Run with the golden venv:  /work/venv-golden/bin/python tests/golden/make_tokenizer_tables.py
"""
import os
import random
import sys
import unicodedata

from tokenizers import Regex, normalizers, pre_tokenizers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "models", "sd15", "data", "clip_unicode.inc")

CLIP_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""
SPLIT = pre_tokenizers.Split(Regex(CLIP_PATTERN), behavior="removed", invert=True)
SPACES = normalizers.Replace(Regex(r"\s+"), " ")
LOWER = normalizers.Lowercase()
NFC = normalizers.NFC()
NFD = normalizers.NFD()

S_BASE, L_BASE, V_BASE, T_BASE = 0xAC00, 0x1100, 0x1161, 0x11A7
L_COUNT, V_COUNT, T_COUNT = 19, 21, 28
N_COUNT = V_COUNT * T_COUNT
S_COUNT = L_COUNT * N_COUNT


def all_chars():
    for c in range(0x110000):
        if not 0xD800 <= c <= 0xDFFF:
            yield c


def pieces(text):
    return [p for p, _ in SPLIT.pre_tokenize_str(text)]


# ---- character classes of the pre-tokenizer: 1 letter, 2 number, 3 space, 0 other ----
def char_class(ch):
    two = pieces(ch + ch)
    if not two:
        cls = 3
    elif len(two) == 2:
        cls = 2
    elif len(pieces("a" + ch)) == 1:
        cls = 1
    else:
        cls = 0
    # The normalizer's \s must be the pre-tokenizer's \s (both are Oniguruma's).
    assert (SPACES.normalize_str("a" + ch + "a") == "a a") == (cls == 3), hex(ord(ch))
    return cls


def ranges_of(values):
    """[(lo, hi, v)] for runs of equal non-zero v over code points."""
    out = []
    for c, v in values:
        if v == 0:
            continue
        if out and out[-1][1] == c - 1 and out[-1][2] == v:
            out[-1][1] = c
        else:
            out.append([c, c, v])
    return out


# ---- lower-casing: runs (first, count, delta, stride) plus the few one-to-many mappings ----
def lower_tables():
    single, multi = [], []
    for c in all_chars():
        lo = LOWER.normalize_str(chr(c))
        if lo == chr(c):
            continue
        if len(lo) == 1:
            single.append((c, ord(lo) - c))
        else:
            assert len(lo) == 2, hex(c)
            multi.append((c, ord(lo[0]), ord(lo[1])))
    runs = []  # [first, count, delta, stride]
    for c, d in single:
        if runs:
            r = runs[-1]
            last = r[0] + (r[1] - 1) * r[3]
            if r[2] == d and r[1] == 1 and c - last in (1, 2):
                r[3] = c - last
                r[1] = 2
                continue
            if r[2] == d and r[1] > 1 and c - last == r[3]:
                r[1] += 1
                continue
        runs.append([c, 1, d, 1])
    return runs, multi


# ---- NFC: combining classes, raw canonical mappings, which composites recompose ----
def raw_mapping(c):
    d = unicodedata.decomposition(chr(c))
    if not d or d.startswith("<"):
        return None
    return [int(x, 16) for x in d.split()]


def is_hangul_syllable(c):
    return S_BASE <= c < S_BASE + S_COUNT


class Model:
    def __init__(self, ccc, decomp, compose):
        self.ccc, self.decomp, self.compose = ccc, decomp, compose

    def full_decompose(self, c, out):
        if is_hangul_syllable(c):
            s = c - S_BASE
            out.append(L_BASE + s // N_COUNT)
            out.append(V_BASE + (s % N_COUNT) // T_COUNT)
            if s % T_COUNT:
                out.append(T_BASE + s % T_COUNT)
        elif c in self.decomp:
            for part in self.decomp[c]:
                self.full_decompose(part, out)
        else:
            out.append(c)

    def nfd(self, text):
        out = []
        for ch in text:
            self.full_decompose(ord(ch), out)
        # canonical ordering: stable sort of each run of non-starters by class
        i = 0
        while i < len(out):
            if self.ccc.get(out[i], 0) == 0:
                i += 1
                continue
            j = i
            while j < len(out) and self.ccc.get(out[j], 0) != 0:
                j += 1
            out[i:j] = sorted(out[i:j], key=lambda x: self.ccc.get(x, 0))
            i = j
        return out

    def pair(self, a, b):
        if L_BASE <= a < L_BASE + L_COUNT and V_BASE <= b < V_BASE + V_COUNT:
            return S_BASE + ((a - L_BASE) * V_COUNT + (b - V_BASE)) * T_COUNT
        if is_hangul_syllable(a) and (a - S_BASE) % T_COUNT == 0 and T_BASE < b < T_BASE + T_COUNT:
            return a + (b - T_BASE)
        return self.compose.get((a, b))

    def nfc(self, text):
        out, starter, last_cc = [], -1, 0
        for c in self.nfd(text):
            cc = self.ccc.get(c, 0)
            if starter >= 0 and (len(out) - 1 == starter or (last_cc != 0 and last_cc < cc)):
                p = self.pair(out[starter], c)
                if p is not None:
                    out[starter] = p
                    continue
            if cc == 0:
                starter = len(out)
            last_cc = cc
            out.append(c)
        return "".join(map(chr, out))


def nfc_tables():
    decomp, compose = {}, {}
    for c in all_chars():
        if is_hangul_syllable(c):
            continue
        ref = NFD.normalize_str(chr(c))
        if ref == chr(c):
            continue  # no decomposition in the reference's Unicode version
        raw = raw_mapping(c)
        assert raw, hex(c)
        decomp[c] = raw
        if len(raw) == 2 and NFC.normalize_str(chr(c)) == chr(c):
            compose[(raw[0], raw[1])] = c
    ccc = {c: unicodedata.combining(chr(c)) for c in all_chars() if unicodedata.combining(chr(c))}
    model = Model(ccc, decomp, compose)
    refs = ["\u0334", "\u0338", "\u093c", "\u094d", "\u0321", "\u0316", "\u0301", "\u035c", "\u035d", "\u0345"]
    # Marks the reference does not know (newer than its Unicode data) are starters there.
    for c in sorted(ccc):
        seqs = ["a" + chr(c) + r for r in refs] + ["a" + r + chr(c) for r in refs]
        if any(model.nfc(s) != NFC.normalize_str(s) or
               "".join(map(chr, model.nfd(s))) != NFD.normalize_str(s) for s in seqs):
            del ccc[c]
            assert all(model.nfc(s) == NFC.normalize_str(s) for s in seqs), hex(c)
    return model


def check_nfc(model):
    for c in all_chars():
        s = chr(c)
        assert model.nfc(s) == NFC.normalize_str(s), hex(c)
        assert "".join(map(chr, model.nfd(s))) == NFD.normalize_str(s), hex(c)
    pool = set()
    for c, parts in model.decomp.items():
        pool.add(c)
        pool.update(parts)
    pool.update(model.ccc)
    pool.update(range(0x1100, 0x1113))
    pool.update(range(0x1161, 0x1176))
    pool.update(range(0x11A8, 0x11C3))
    pool.update([0xAC00, 0xAC01, 0xD7A3, 0x41, 0x61, 0x20])
    pool = sorted(pool)
    rng = random.Random(7)
    for _ in range(300000):
        s = "".join(chr(rng.choice(pool)) for _ in range(rng.randint(2, 6)))
        assert model.nfc(s) == NFC.normalize_str(s), [hex(ord(x)) for x in s]
    # The C++ code skips NFC for text below U+0300: nothing there changes or composes.
    assert all(model.nfc(chr(c)) == chr(c) for c in range(0x300))
    assert all(b >= 0x300 for _, b in model.compose)
    # every starter followed by every mark, for the bases that compose at all
    bases = sorted({a for a, _ in model.compose})
    marks = sorted(model.ccc)
    for a in bases:
        s = "".join(chr(a) + chr(m) + " " for m in marks)
        assert model.nfc(s) == NFC.normalize_str(s), hex(a)


def emit(path, classes, lower_runs, lower_multi, model):
    lines = [
        "// Generated by tests/golden/make_tokenizer_tables.py from HF tokenizers (the engine of",
        "// transformers' CLIPTokenizer) and Python's unicodedata. Do not edit; re-run the script.",
        "// Included by models/sd15/tokenizer_text.cpp only.",
        "",
        "// Pre-tokenizer classes {first, last, class}: 1 letter \\p{L}, 2 number \\p{N}, 3 space \\s;",
        "// code points in no range are 'other'.",
        f"static const CharRange kCharClass[{len(classes)}] = {{",
    ]
    lines += wrap([f"{{0x{a:X},0x{b:X},{v}}}" for a, b, v in classes])
    lines += ["};", "",
              "// Lower-casing runs {first, count, delta, stride}: first + k*stride maps to itself + delta.",
              f"static const LowerRun kLowerRuns[{len(lower_runs)}] = {{"]
    lines += wrap([f"{{0x{a:X},{n},{d},{s}}}" for a, n, d, s in lower_runs])
    lines += ["};", "", "// Characters that lower-case to two characters {c, first, second}.",
              f"static const LowerMulti kLowerMulti[{len(lower_multi)}] = {{"]
    lines += wrap([f"{{0x{a:X},0x{b:X},0x{c:X}}}" for a, b, c in lower_multi])
    ccc = ranges_of(sorted(model.ccc.items()))
    lines += ["};", "", "// Canonical combining classes {first, last, class}; absent means 0.",
              f"static const CharRange kCombining[{len(ccc)}] = {{"]
    lines += wrap([f"{{0x{a:X},0x{b:X},{v}}}" for a, b, v in ccc])
    decomp = sorted(model.decomp.items())
    comp = set(model.compose.values())
    lines += ["};", "",
              "// Canonical decompositions {c, first, second (0: none), recomposes in NFC}, sorted by c.",
              "// Hangul syllables are algorithmic and not listed.",
              f"static const Decomposition kDecompositions[{len(decomp)}] = {{"]
    lines += wrap([f"{{0x{c:X},0x{p[0]:X},0x{(p[1] if len(p) > 1 else 0):X},{int(c in comp)}}}"
                   for c, p in decomp])
    lines += ["};", ""]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))


def wrap(items, width=100):
    out, line = [], "   "
    for it in items:
        if len(line) + len(it) + 2 > width:
            out.append(line)
            line = "   "
        line += " " + it + ","
    if line.strip():
        out.append(line)
    return out


def main():
    classes = ranges_of((c, char_class(chr(c))) for c in all_chars())
    # Surrogates never reach the tokenizer (invalid UTF-8 is rejected before).
    runs, multi = lower_tables()
    model = nfc_tables()
    check_nfc(model)
    emit(OUT, classes, runs, multi, model)
    print(f"wrote {OUT}: {len(classes)} class ranges, {len(runs)} lower runs, {len(multi)} multi, "
          f"{len(model.decomp)} decompositions, {len(model.compose)} compositions, "
          f"{len(model.ccc)} combining marks")


if __name__ == "__main__":
    sys.exit(main())
