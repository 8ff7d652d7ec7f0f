#!/usr/bin/env python3
"""Golden data for tests/test_tokenizer.cpp: ids from transformers' CLIPTokenizer.

1. Writes models/sd15/data/clip_merges.txt, the vocabulary the C++ tokenizer embeds: the CLIP BPE
   merges as the PyPI package open_clip_torch ships them (open_clip/bpe_simple_vocab_16e6.txt.gz),
   cut to the 48894 merges CLIP uses (lines 1 .. 49152-256-2 of that file, as CLIP's own tokenizer
   does) under a "#version: 0.2" header: the format of a diffusers tokenizer/merges.txt. It is the
   same list as SD1.5's tokenizer/merges.txt. Needs `pip install --no-deps open_clip_torch` in the
   venv (or --bpe PATH to the .gz); without either, the committed file is used as it is.
2. Builds vocab.json the way CLIP does (256 byte characters, the same with "</w>", one token per
   merge, <|startoftext|>, <|endoftext|>: 49408 tokens), loads CLIPTokenizer from vocab.json +
   merges.txt, and writes tests/golden/data/tokenizer/:
     captions.txt   one caption a line; '\\' and invisible characters escaped as \\u{HEX}
     ids77.txt      per caption, the 77 ids of tokenizer(c, padding="max_length", max_length=77,
                    truncation=True)
     tokens.txt     per caption, every content id (no BOS/EOS, no truncation)
     kohya.txt      per caption with more than 60 content tokens and every 10th other one: the
                    caption's index, then kohya's [3, 77] chunks for max_token_length 225 (and
                    the [2, 77] ones for 150 in kohya150.txt), built as sd-scripts'
                    get_input_ids does (tokenize to 227 / 152, then BOS + 75 + EOS per chunk)
     tiny/          a small tokenizer folder (vocab.json, merges.txt): the byte tokens, the first
                    3000 merges, the two special tokens (ids 3512, 3513)
     ids_tiny.txt   77 ids per caption of the first 120 captions with that folder
Run with the golden venv: /work/venv-golden/bin/python tests/golden/make_tokenizer_golden.py
Deterministic (seeded).
"""
import argparse
import gzip
import importlib.util
import json
import os
import pathlib
import random
import shutil
import sys
import tempfile
import time
import unicodedata

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = ROOT / "models" / "sd15" / "data"
OUT = pathlib.Path(__file__).resolve().parent / "data" / "tokenizer"
N_MERGES = 49152 - 256 - 2  # CLIP's vocabulary: 49408 = 512 byte tokens + merges + 2 specials


def find_bpe(arg):
    if arg:
        return pathlib.Path(arg)
    spec = importlib.util.find_spec("open_clip")  # locates the package without importing it
    if spec and spec.submodule_search_locations:
        p = pathlib.Path(list(spec.submodule_search_locations)[0]) / "bpe_simple_vocab_16e6.txt.gz"
        if p.exists():
            return p
    return None


def write_merges(bpe):
    target = DATA / "clip_merges.txt"
    if bpe is None:
        print(f"open_clip not installed and no --bpe: keeping {target}")
        return
    lines = gzip.open(bpe).read().decode("utf-8").split("\n")
    merges = lines[1:N_MERGES + 1]
    assert len(merges) == N_MERGES and all(len(m.split(" ")) == 2 for m in merges)
    text = "#version: 0.2\n" + "\n".join(merges) + "\n"
    target.write_text(text, encoding="utf-8", newline="\n")
    print(f"wrote {target} from {bpe}")


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def write_folder(folder, merges, ascii_json=False):
    byte_tokens = list(bytes_to_unicode().values())
    vocab = byte_tokens + [t + "</w>" for t in byte_tokens]
    vocab += ["".join(m.split(" ")) for m in merges] + ["<|startoftext|>", "<|endoftext|>"]
    assert len(set(vocab)) == len(vocab)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "vocab.json", "w", encoding="utf-8") as f:
        json.dump({t: i for i, t in enumerate(vocab)}, f, ensure_ascii=ascii_json)
    with open(folder / "merges.txt", "w", encoding="utf-8", newline="\n") as f:
        f.write("#version: 0.2\n" + "\n".join(merges) + "\n")


# ---------------------------------------------------------------- captions
TAGS = ["1girl", "1boy", "solo", "long hair", "short hair", "blue eyes", "smile", "looking at viewer",
        "outdoors", "sky", "cloud", "day", "night", "school uniform", "red dress", "holding sword",
        "cherry blossoms", "upper body", "full body", "from side", "open mouth", "blush", "hat",
        "white background", "simple background", "animal ears", "cat ears", "twintails", "ponytail",
        "highres", "absurdres", "best quality", "masterpiece", "ultra-detailed", "8k", "hdr",
        "depth of field", "bokeh", "film grain", "cinematic lighting", "rim light", "1980s (style)",
        "retro artstyle", "oil painting (medium)", "watercolor", "pixel art", "chibi", "bangs",
        "hair_ornament", "thighhighs", "zettai_ryouiki", "star (symbol)", "heart-shaped pupils",
        ":d", ";)", "^_^", ">_<", "o_o", "@_@", "\\(^o^)/", "score_9", "score_8_up", "rating:safe"]

WORDS = ("a the of photo painting portrait landscape mountain river city street night rain neon light "
         "woman man child dog cat bird horse tree flower garden house castle ocean beach sunset "
         "sunrise forest snow winter summer autumn spring old young beautiful dark bright red blue "
         "green yellow black white golden silver glowing misty foggy detailed intricate realistic "
         "stylized cinematic dramatic soft warm cold ancient futuristic cyberpunk steampunk fantasy "
         "medieval robot dragon wizard knight princess warrior ship train car bicycle bridge tower "
         "window door table chair book cup coffee tea bread cake fruit apple orange lemon").split()

FIXED = [
    "", " ", "   \t\n  ", "a", "A", "a photo of a cat", "A photo of a cat.", "A PHOTO OF A CAT",
    "an astronaut riding a horse on mars, artstation, hd, dramatic lighting, detailed",
    "portrait of a woman, oil on canvas, by john singer sargent",
    "don't do it", "it's a dog's life", "we're here", "they've gone", "I'm fine", "you'll see", "he'd go",
    "DON'T STOP", "IT'S", "'s 't 're 've 'm 'll 'd", "''s", "'''", "rock'n'roll", "o'clock", "ma'am",
    "l'été", "y'all'd've", "won’t", "it’s “quoted”", "‘single’", "«guillemets»", "„German“",
    "!!!", "???", "...", "?!?!", "!!!???...", "----", "--->", "<--", "<=>", "***bold***", "__init__",
    "#hashtag @user $100 %50 ^caret &amp &lt;tag&gt; &#39; &#x27;", "C++ / C# / F#", "e=mc^2",
    "(masterpiece:1.2), (best quality:1.4), [bad hands], {extra}",
    "((((very emphasized))))", "[[[[de-emphasized]]]]", "\\(escaped parens\\)", "a (b:0.5) c",
    "1girl, solo, (masterpiece:1.2), best quality, looking at viewer, BREAK, outdoors",
    "0", "7", "42", "1234567890", "3.14159", "1,000,000", "-273.15°C", "2024-01-31", "12:30pm",
    "v1.5", "sd15", "x2", "4k", "1080p", "100%", "#ff00aa", "0x1F600",
    "١٢٣ arabic digits", "४२ devanagari digits", "²³ superscripts", "½ ¾ fractions", "Ⅻ roman", "①②③",
    "café crème brûlée", "naïve façade", "Ångström", "smörgåsbord", "jalapeño", "São Paulo",
    "Łódź Kraków Gdańsk", "Dvořák", "Tiếng Việt có dấu", "Straße", "STRASSE ẞ", "İstanbul ıi",
    "ΟΔΟΣ ΑΣ Σ σς", "Ελληνικά γράμματα", "Привет, мир!", "Москва ЁЛКА ёлка", "Україна їжак ґанок",
    "日本語のテキスト", "東京タワーと富士山", "中文字符测试", "繁體中文測試", "한국어 텍스트", "ｈａｌｆ　ｗｉｄｔｈ ＡＢＣ １２３",
    "ﾊﾝｶｸｶﾀｶﾅ", "ひらがな カタカナ 漢字", "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया", "สวัสดีชาวโลก",
    "ქართული", "Հայերեն", "አማርኛ", "ᏣᎳᎩ", "ꦗꦮ", "𝒥ohn ℋancock", "𝕄𝕒𝕥𝕙 𝐛𝐨𝐥𝐝", "ﬁne ﬂow ﬀ",
    "😀", "🐱 cat", "👍🏽 thumbs", "👨‍👩‍👧‍👦 family", "🇯🇵🇫🇷 flags", "❤️ heart", "✨✨✨", "🔥🔥 fire 🔥",
    "☕️ coffee", "©®™", "→←↑↓", "♠♣♥♦", "★☆", "∑∫√∞≠≈", "€£¥₹₿", "°±×÷", "§¶†‡", "•·…",
    "e\u0301 decomposed", "cafe\u0301", "A\u030a\u0301", "o\u0308\u0304", "n\u0303", "\u0301 leading mark",
    "\u1100\u1161\u11a8 jamo", "\u1112\u1161\u11ab\u1100\u1173\u11af", "a\u0323\u0302 vietnamese order",
    "q\u0307\u0323", "\u0915\u093c", "\u212b angstrom sign", "\u2126 ohm", "K\u212a kelvin",
    "tab\there", "new\nline", "cr\rlf\r\n", "nb\u00a0sp", "ideo\u3000space", "zero\u200bwidth",
    "zw\u200dj", "bom\ufeffhere", "ctrl\x01\x02\x7f", "nul\x00byte", "file\x1csep", "nel\x85x",
    "line\u2028sep\u2029para", "thin\u2009space", "en\u2002em\u2003", "soft\u00adhyphen",
    "<|startoftext|>", "<|endoftext|>", "a<|endoftext|>b", "<|startoftext|>a photo<|endoftext|>",
    "<|ENDOFTEXT|>", "<|endoftext|", "<|endoftext|><|endoftext|>", "<| endoftext |>", "<<||>>",
    "path/to/file.png", "https://example.com/a?b=c&d=e", "user@example.com", "C:\\Users\\x",
    "snake_case_name", "camelCaseName", "kebab-case-name", "ALLCAPS", "MiXeD CaSe",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "supercalifragilisticexpialidocious pneumonoultramicroscopicsilicovolcanoconiosis",
    "x" * 300, "ab" * 200, "!" * 200, "9" * 100, "é" * 100, "猫" * 100,
]


def kohya_caption(rng):
    n = rng.randint(3, 40)
    out = []
    for _ in range(n):
        t = rng.choice(TAGS)
        r = rng.random()
        if r < 0.15:
            t = f"({t}:{rng.choice(['0.8', '1.1', '1.2', '1.35', '1.5'])})"
        elif r < 0.22:
            t = "(" * rng.randint(1, 3) + t + ")" * rng.randint(1, 3)
        elif r < 0.27:
            t = f"[{t}]"
        elif r < 0.30:
            t = t.replace("_", " ").upper()
        out.append(t)
    sep = rng.choice([", ", ",", " , ", ", "])
    return sep.join(out)


def prose(rng, n):
    words = [rng.choice(WORDS) for _ in range(n)]
    for i in range(len(words)):
        if rng.random() < 0.08:
            words[i] += rng.choice([",", ".", "!", ";", ":"])
        if rng.random() < 0.05:
            words[i] = words[i].capitalize()
    return " ".join(words)


def unicode_soup(rng, pools):
    n = rng.randint(1, 30)
    s = []
    for _ in range(n):
        s.append(rng.choice(rng.choice(pools)))
    return "".join(s)


def captions():
    rng = random.Random(1234)
    caps = list(FIXED)
    caps += [kohya_caption(rng) for _ in range(90)]
    caps += [prose(rng, rng.randint(3, 25)) for _ in range(40)]
    caps += [prose(rng, rng.randint(60, 250)) for _ in range(20)]  # longer than 75 tokens
    letters = "aeiouxyzßéèàçñøåäöüœæÿıİſΣσςΑωπЖжЁёЯяגשعبक्षत्र漢字かなカナ한글ᄀ\u1161\u11a8"
    marks = "\u0300\u0301\u0302\u0303\u0308\u030a\u0323\u0327\u0345\u093c\u0334\u05b0\u064b"
    others = list("!?.,;:'\"-_()[]{}<>/\\|@#$%^&*+=~`") + ["'s", "'t", "'re", "'ll", "'d", "'m", "'ve"]
    spaces = [" ", "  ", "\t", "\n", "\u00a0", "\u3000", "\u2009", "\u200b", "\x1c", "\x85"]
    digits = list("0123456789٣४²½Ⅻ①")
    emoji = ["😀", "👍🏽", "🇯🇵", "❤️", "👨‍👩‍👧", "🐱", "\ufe0f", "\u200d"]
    pools = [list(letters), list(marks), others, spaces, digits, emoji, [chr(c) for c in range(0x20, 0x7f)]]
    caps += [unicode_soup(rng, pools) for _ in range(80)]
    # a few NFD versions of accented captions, and upper-cased ones
    for c in ["café crème brûlée", "Tiếng Việt có dấu", "한국어 텍스트", "Ångström", "ΟΔΟΣ ΑΣ"]:
        caps.append(unicodedata.normalize("NFD", c))
        caps.append(unicodedata.normalize("NFKD", c).upper())
    return caps


def escape(s):
    out = []
    for ch in s:
        c = ord(ch)
        if ch == "\\":
            out.append("\\\\")
        elif c < 0x20 or 0x7F <= c <= 0x9F or c in (0x2028, 0x2029, 0xFEFF, 0x85):
            out.append("\\u{%X}" % c)
        else:
            out.append(ch)
    return "".join(out)


def kohya_chunks(tok, text, max_token_length):
    # sd-scripts train_util.get_input_ids, SD1.x branch (pad token == eos token)
    model_max = 77
    max_len = max_token_length + 2
    ids = tok(text, padding="max_length", truncation=True, max_length=max_len).input_ids
    chunks = []
    for i in range(1, max_len - model_max + 2, model_max - 2):
        chunks.append([ids[0]] + ids[i:i + model_max - 2] + [ids[-1]])
    return chunks


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bpe", help="path to open_clip's bpe_simple_vocab_16e6.txt.gz")
    args = ap.parse_args()
    write_merges(find_bpe(args.bpe))

    from transformers import CLIPTokenizer

    merges_text = (DATA / "clip_merges.txt").read_text(encoding="utf-8")
    merges = merges_text.split("\n")[1:N_MERGES + 1]
    tmp = pathlib.Path(tempfile.mkdtemp())
    try:
        write_folder(tmp / "full", merges)
        tok = CLIPTokenizer.from_pretrained(str(tmp / "full"))
        assert tok.bos_token_id == 49406 and tok.eos_token_id == 49407 and tok.pad_token_id == 49407

        caps = captions()
        assert len(caps) >= 300 and all("\n" not in escape(c) for c in caps)
        OUT.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        ids77 = [tok(c, padding="max_length", max_length=77, truncation=True).input_ids for c in caps]
        dt = time.perf_counter() - t0
        content = [tok(c, add_special_tokens=False).input_ids for c in caps]
        with open(OUT / "captions.txt", "w", encoding="utf-8", newline="\n") as f:
            f.writelines(escape(c) + "\n" for c in caps)
        with open(OUT / "ids77.txt", "w", newline="\n") as f:
            f.writelines(" ".join(map(str, ids)) + "\n" for ids in ids77)
        with open(OUT / "tokens.txt", "w", newline="\n") as f:
            f.writelines(" ".join(map(str, ids)) + "\n" for ids in content)
        for n, name in [(225, "kohya.txt"), (150, "kohya150.txt")]:
            with open(OUT / name, "w", newline="\n") as f:
                for i, c in enumerate(caps):
                    if len(content[i]) > 60 or i % 10 == 0:
                        flat = [x for ch in kohya_chunks(tok, c, n) for x in ch]
                        f.write(f"{i} " + " ".join(map(str, flat)) + "\n")

        # a small tokenizer/ folder (vocab.json with \u escapes this time, as json.dump writes by
        # default), for the folder path with other special-token ids
        if (OUT / "tiny").exists():
            shutil.rmtree(OUT / "tiny")
        write_folder(OUT / "tiny", merges[:3000], ascii_json=True)
        tiny = CLIPTokenizer.from_pretrained(str(OUT / "tiny"))
        assert tiny.bos_token_id == 3512 and tiny.eos_token_id == 3513
        with open(OUT / "ids_tiny.txt", "w", newline="\n") as f:
            for c in caps[:120]:
                ids = tiny(c, padding="max_length", max_length=77, truncation=True).input_ids
                f.write(" ".join(map(str, ids)) + "\n")
    finally:
        shutil.rmtree(tmp)
    print(f"{len(caps)} captions, {sum(len(c) > 75 for c in content)} longer than 75 tokens; "
          f"transformers took {dt * 1e3:.1f} ms for the 77-token encodings; wrote {OUT}")


if __name__ == "__main__":
    sys.exit(main())
