#!/usr/bin/env python3
"""Golden data for image decoding (data/image.cpp), checked by tests/test_data_image.cpp.

Writes small image files in every supported layout, the corrupt corpus, and for each readable file
a reference PNG of what Pillow (kohya's decoder) shows, under our documented rules: EXIF orientation
applied (ImageOps.exif_transpose), alpha composited over white as round((c*a + 255*(255-a)) / 255),
16-bit samples reduced to their high byte, CMYK converted by Pillow. Output in
tests/golden/data/dataset/images/:
  ok/<name>            readable images; ok/<name>.ref.png  Pillow's RGB; <name>.alpha.png  the alpha
  bad/<name>           the corrupt corpus (names say what is wrong): headers that lie or are cut,
                       and files whose header is sound but whose image data is damaged (found only
                       by reading the whole file: verify_image)
Run with the golden venv: /work/venv-golden/bin/python tests/golden/make_data_images.py
"""
import io
import os
import shutil
import struct
import zlib

import numpy as np
from PIL import Image, ImageOps

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "dataset", "images")


def pattern(w, h, seed):
    """Smooth gradients plus coarse blocks: JPEG keeps them recognisable, orientation is visible."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    img = np.stack([x * 255 // max(w - 1, 1), y * 255 // max(h - 1, 1), (x + y) * 127 // max(w + h - 2, 1)], -1)
    blocks = rng.integers(0, 80, size=((h + 7) // 8, (w + 7) // 8, 3))
    img = img + np.kron(blocks, np.ones((8, 8, 1), dtype=np.int64))[:h, :w]
    return np.clip(img, 0, 255).astype(np.uint8)


def over_white(rgba):
    c = rgba[..., :3].astype(np.int64)
    a = rgba[..., 3:4].astype(np.int64)
    return ((c * a + 255 * (255 - a) + 127) // 255).astype(np.uint8)


def save(pil, name, **kw):
    pil.save(os.path.join(OUT, "ok", name), **kw)


def ref(name, rgb, alpha=None):
    Image.fromarray(rgb).save(os.path.join(OUT, "ok", name + ".ref.png"))
    if alpha is not None:
        Image.fromarray(alpha).save(os.path.join(OUT, "ok", name + ".alpha.png"))


def pillow_rgb(name):
    with Image.open(os.path.join(OUT, "ok", name)) as im:
        im = ImageOps.exif_transpose(im)
        return np.asarray(im.convert("RGB"))


def exif_with_orientation(o):
    e = Image.Exif()
    e[0x0112] = o
    return e.tobytes()


def png_chunk(kind, body):
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png_file(raw_rows, idat=None, before=b"", after=b""):
    """A 24x16 RGB PNG of the given filtered rows (one IDAT), chunks spliced in before / after it."""
    body = zlib.compress(raw_rows, 9) if idat is None else idat
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", 24, 16, 8, 2, 0, 0, 0)) + before
            + png_chunk(b"IDAT", body) + after + png_chunk(b"IEND", b""))


def damaged_data(bad, rgb, jpg, bmp):
    """Files whose headers read well and whose image data does not (each class named by its file)."""
    raw = b"".join(b"\0" + rgb[r].tobytes() for r in range(16))
    files = {
        "png_idat_not_zlib.png": png_file(raw, idat=b"this is not zlib data " * 8),
        "png_short_idat.png": png_file(raw, idat=zlib.compress(raw, 9)[:len(zlib.compress(raw, 9)) // 2]),
        "png_filter7.png": png_file(b"".join(b"\7" + rgb[r].tobytes() for r in range(16))),
        # Intact chunks, a wrong Adler-32 at the end of the zlib stream: every row inflates.
        "png_zlib_checksum.png": png_file(raw, idat=zlib.compress(raw, 9)[:-4] + b"\0\0\0\0"),
        # An ancillary chunk after the image data whose length field is 2^31.
        "png_chunk_length_2g.png": png_file(raw, after=struct.pack(">I", 1 << 31) + b"tEXt" + b"junk"),
        "png_bad_text_crc.png": png_file(raw, before=png_chunk(b"tEXt", b"Comment\0hello")[:-4] + b"\0\0\0\0"),
    }
    good = png_file(raw)
    files["png_bad_idat_crc.png"] = good[:-16] + bytes([good[-16] ^ 1]) + good[-15:]  # the CRC before IEND's
    # The first scan's entropy-coded data: bytes in its middle overwritten with all-ones, which no
    # Huffman table has as a code (libjpeg warns "bad Huffman code" and fills the rest with grey).
    sos = jpg.index(b"\xff\xda")
    start = sos + 2 + struct.unpack(">H", jpg[sos + 2:sos + 4])[0]
    end = jpg.rindex(b"\xff\xd9")
    mid = (start + end) // 2
    files["jpeg_corrupt_scan.jpg"] = jpg[:mid] + b"\xfe" * 24 + jpg[mid + 24:]
    files["jpeg_scan_cut.jpg"] = jpg[:mid] + b"\xff\xd9"  # the scan ends early at a complete end marker
    vp8x = b"VP8X" + struct.pack("<I", 10) + b"\0\0\0\0" + (23).to_bytes(3, "little") + (15).to_bytes(3, "little")
    files["webp_vp8x_no_image.webp"] = b"RIFF" + struct.pack("<I", 4 + len(vp8x)) + b"WEBP" + vp8x
    files["bmp_7bpp.bmp"] = bmp[:28] + struct.pack("<H", 7) + bmp[30:]
    for name, data in files.items():
        with open(os.path.join(bad, name), "wb") as f:
            f.write(data)


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(os.path.join(OUT, "ok"))
    os.makedirs(os.path.join(OUT, "bad"))
    rgb = pattern(24, 16, 1)

    save(Image.fromarray(rgb), "rgb.png")
    ref("rgb.png", rgb)
    alpha = np.tile(np.linspace(0, 255, 24).astype(np.uint8), (16, 1))
    alpha[:4] = 0
    rgba = np.concatenate([rgb, alpha[..., None]], -1)
    save(Image.fromarray(rgba), "rgba.png")
    ref("rgba.png", over_white(rgba), alpha)
    grey = rgb[..., 0]
    save(Image.fromarray(grey), "grey.png")
    ref("grey.png", np.repeat(grey[..., None], 3, -1))
    la = np.stack([grey, alpha], -1)
    save(Image.fromarray(la), "grey_alpha.png")
    ref("grey_alpha.png", over_white(np.concatenate([np.repeat(grey[..., None], 3, -1), alpha[..., None]], -1)))
    pal = Image.fromarray(rgb).quantize(16)
    save(pal, "palette.png")
    ref("palette.png", np.asarray(pal.convert("RGB")))
    rgb16 = rgb.astype(np.uint16) * 257 + np.uint16(91)
    # Pillow cannot write 16-bit RGB PNG: build it by hand (filter 0 rows, one IDAT).
    raw = b"".join(b"\0" + rgb16[r].astype(">u2").tobytes() for r in range(16))
    with open(os.path.join(OUT, "ok", "rgb16.png"), "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", 24, 16, 16, 2, 0, 0, 0))
                + png_chunk(b"IDAT", zlib.compress(raw, 9)) + png_chunk(b"IEND", b""))
    ref("rgb16.png", (rgb16 >> 8).astype(np.uint8))
    assert np.array_equal(pillow_rgb("rgb16.png"), (rgb16 >> 8).astype(np.uint8))  # Pillow agrees
    grey16 = grey.astype(np.uint16) * 256 + np.uint16(200)
    save(Image.fromarray(grey16), "grey16.png")
    ref("grey16.png", np.repeat((grey16 >> 8).astype(np.uint8)[..., None], 3, -1))

    for q, name in ((95, "rgb.jpg"), (70, "rgb_q70.jpeg")):
        save(Image.fromarray(rgb), name, quality=q)
        ref(name, pillow_rgb(name))
    save(Image.fromarray(rgb), "progressive.jpg", quality=90, progressive=True)
    ref("progressive.jpg", pillow_rgb("progressive.jpg"))
    save(Image.fromarray(grey), "grey.jpg", quality=95)
    ref("grey.jpg", pillow_rgb("grey.jpg"))
    save(Image.fromarray(rgb).convert("CMYK"), "cmyk.jpg", quality=95)
    ref("cmyk.jpg", pillow_rgb("cmyk.jpg"))
    for o in range(1, 9):
        name = f"orient{o}.jpg"
        save(Image.fromarray(rgb), name, quality=95, exif=exif_with_orientation(o))
        ref(name, pillow_rgb(name))

    save(Image.fromarray(rgb), "rgb.bmp")
    ref("rgb.bmp", rgb)
    save(Image.fromarray(rgb), "lossless.webp", lossless=True)
    ref("lossless.webp", rgb)
    save(Image.fromarray(rgba), "alpha.webp", lossless=True, exact=True)
    ref("alpha.webp", over_white(rgba), alpha)
    save(Image.fromarray(rgb), "lossy.webp", quality=90)
    ref("lossy.webp", pillow_rgb("lossy.webp"))
    save(Image.fromarray(rgb[:1, :1]), "1x1.png")
    ref("1x1.png", rgb[:1, :1])
    wide = np.tile(pattern(100, 10, 2), (1, 100, 1))
    save(Image.fromarray(wide), "10000x10.png")

    bad = os.path.join(OUT, "bad")
    open(os.path.join(bad, "empty.png"), "wb").close()
    with open(os.path.join(OUT, "ok", "rgb.png"), "rb") as f:
        png = f.read()
    with open(os.path.join(OUT, "ok", "rgb.jpg"), "rb") as f:
        jpg = f.read()
    with open(os.path.join(bad, "truncated.png"), "wb") as f:
        f.write(png[: len(png) * 2 // 3])
    with open(os.path.join(bad, "truncated.jpg"), "wb") as f:
        f.write(jpg[: len(jpg) * 2 // 3])
    with open(os.path.join(bad, "corrupt_data.png"), "wb") as f:  # intact chunks, garbage inside IDAT
        idat = png.index(b"IDAT") + 4
        f.write(png[:idat + 2] + bytes(b ^ 0x5A for b in png[idat + 2:-16]) + png[-16:])
    with open(os.path.join(bad, "png_named.jpg"), "wb") as f:
        f.write(png)
    with open(os.path.join(bad, "text.png"), "wb") as f:
        f.write(b"this is a caption, not an image\n")
    with open(os.path.join(bad, "bad_header.png"), "wb") as f:
        f.write(png[:8] + b"\0" * 40)
    with open(os.path.join(bad, "huge_claim.png"), "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", 100000, 100000, 8, 2, 0, 0, 0))
                + png_chunk(b"IDAT", zlib.compress(b"\0" * 64)) + png_chunk(b"IEND", b""))
    with open(os.path.join(OUT, "ok", "rgb.bmp"), "rb") as f:
        bmp = f.read()
    with open(os.path.join(bad, "truncated.bmp"), "wb") as f:
        f.write(bmp[: len(bmp) // 2])
    damaged_data(bad, rgb, jpg, bmp)
    with open(os.path.join(OUT, "ok", "lossy.webp"), "rb") as f:
        webp = f.read()
    with open(os.path.join(bad, "truncated.webp"), "wb") as f:
        f.write(webp[: len(webp) // 2])


if __name__ == "__main__":
    main()
