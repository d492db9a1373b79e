"""Hostile image generators (see hostile_files.py for ``Case`` and how rounds work).

Truncated, bit-flipped, zero-byte, text and PostScript named ``.png``, decompression bombs by
declared size, 1 × 100000, every PIL mode, animated images, broken EXIF, folders, FIFOs and
device links named ``.png``, non-UTF-8 and control-character names, and valid controls.
"""

from __future__ import annotations

import io
import os
import random
import struct
import warnings
import zlib
from collections.abc import Callable
from functools import cache
from pathlib import Path

import numpy as np
from hostile_files import Case, Expect
from PIL import Image

Writer = Callable[[Path], Path]


# --------------------------------------------------------------------------- helpers


def _file(name: str, data: bytes | Callable[[], bytes]) -> Writer:
    """A writer of ``data`` (or what the callable returns, made when written) as ``folder/name``."""

    def write(folder: Path) -> Path:
        path = folder / name
        path.write_bytes(data() if callable(data) else data)
        return path

    return write


def _image(case: str, name: str, expect: Expect, data: bytes | Callable[[], bytes], **kw) -> Case:
    return Case(case, "image", _file(name, data), expect, **kw)


def _pixels(size: tuple[int, int], seed: int, channels: int = 3) -> np.ndarray:
    """(H, W, C) uint8 smooth gradient plus noise: compresses a little, looks like something."""
    w, h = size
    g = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    base = (xx * 255 // max(w - 1, 1) + yy * 128 // max(h - 1, 1)) % 256
    noise = g.integers(0, 64, size=(h, w, channels))
    return ((base[:, :, None] + noise) % 256).astype(np.uint8)


def encode(image: Image.Image, fmt: str, **params) -> bytes:
    """``image`` saved in ``fmt`` (PIL's name) to bytes (Pillow's deprecation of a format, e.g.
    IM, is not the generator's business)."""
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        image.save(buf, format=fmt, **params)
    return buf.getvalue()


def _mode_image(mode: str, size: tuple[int, int] = (40, 30), seed: int = 0) -> Image.Image:
    """A ``size`` image in ``mode`` with varied content (wide modes use their whole range)."""
    rgb = Image.fromarray(_pixels(size, seed))
    if mode in ("I", "I;16", "I;16B", "I;16L", "F"):
        values = _pixels(size, seed, 1)[:, :, 0].astype(np.float64)
        if mode == "F":
            return Image.fromarray((values / 255.0).astype(np.float32), mode="F")
        big = (values * 257).astype(np.int32 if mode == "I" else np.uint16)
        image = Image.fromarray(big)
        return image if mode in ("I", "I;16") else image.convert(mode)
    if mode == "P":
        return rgb.quantize(16)
    if mode == "PA":
        return rgb.quantize(16).convert("PA")
    return rgb.convert(mode)


# Base images of every mainstream format (40×30 RGB unless said), damaged by the random generators.
BASE_FORMATS: dict[str, tuple[str, str, dict]] = {
    "png": ("PNG", ".png", {}),
    "jpeg": ("JPEG", ".jpg", {"quality": 90}),
    "gif": ("GIF", ".gif", {}),
    "bmp": ("BMP", ".bmp", {}),
    "tiff": ("TIFF", ".tif", {}),
    "tiff-deflate": ("TIFF", ".tif", {"compression": "tiff_deflate"}),
    "webp": ("WEBP", ".webp", {"quality": 80}),
    "ppm": ("PPM", ".ppm", {}),
    "ico": ("ICO", ".ico", {}),
}


@cache
def base_bytes(key: str) -> bytes:
    fmt, _, params = BASE_FORMATS[key]
    image = Image.fromarray(_pixels((40, 30), 7))
    if fmt == "GIF":
        image = image.quantize(64)
    return encode(image, fmt, **params)


def _chunk(tag: bytes, data: bytes) -> bytes:
    """One PNG chunk with its CRC."""
    crc = zlib.crc32(tag + data) & 0xFFFFFFFF
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", crc)


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_with_size(w: int, h: int, color: int = 2, idat: bytes | None = None) -> bytes:
    """A PNG whose header says ``w × h`` (colour type ``color``, 8 bits) with little or no data."""
    ihdr = struct.pack(">IIBBBBB", w, h, 8, color, 0, 0, 0)
    data = zlib.compress(b"") if idat is None else idat
    return PNG_SIGNATURE + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", data) + _chunk(b"IEND", b"")


def zero_png(w: int, h: int) -> bytes:
    """A real, valid ``w × h`` black RGB PNG (every row filter 0, all zeros), made in chunks."""
    row = bytes(3 * w + 1)
    z = zlib.compressobj(6)
    rows_per_block = max(1, (8 << 20) // len(row))
    parts = []
    left = h
    while left:
        n = min(left, rows_per_block)
        parts.append(z.compress(row * n))
        left -= n
    parts.append(z.flush())
    return png_with_size(w, h, 2, b"".join(parts))


def gif_with_size(w: int, h: int) -> bytes:
    screen = struct.pack("<HHBBB", w, h, 0, 0, 0)
    descriptor = b"," + struct.pack("<HHHHB", 0, 0, w, h, 0)
    return b"GIF89a" + screen + descriptor + b"\x08\x02\x4c\x01\x00;"


def bmp_with_size(w: int, h: int, bpp: int = 24) -> bytes:
    header = struct.pack("<IiiHHIIiiII", 40, w, h, 1, bpp, 0, 0, 2835, 2835, 0, 0)
    palette = bytes(4 * (1 << bpp)) if bpp <= 8 else b""
    offset = 14 + len(header) + len(palette)
    return b"BM" + struct.pack("<IHHI", offset + 16, 0, 0, offset) + header + palette + bytes(16)


def jpeg_with_size(w: int, h: int) -> bytes:
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, h, w, 1) + b"\x01\x11\x00"
    sos = b"\xff\xda" + struct.pack(">HB", 8, 1) + b"\x01\x00\x00\x3f\x00"
    return b"\xff\xd8" + sof + sos + bytes(10) + b"\xff\xd9"


def tiff_with_size(w: int, h: int) -> bytes:
    """Little-endian TIFF, one 8-bit grey strip of 10 bytes, header saying ``w × h``."""
    entries = [
        (256, 4, 1, w),  # ImageWidth LONG
        (257, 4, 1, h),  # ImageLength
        (258, 3, 1, 8),  # BitsPerSample SHORT
        (259, 3, 1, 1),  # Compression none
        (262, 3, 1, 1),  # Photometric BlackIsZero
        (273, 4, 1, 0),  # StripOffsets (patched below)
        (277, 3, 1, 1),  # SamplesPerPixel
        (278, 4, 1, h),  # RowsPerStrip
        (279, 4, 1, 10),  # StripByteCounts
    ]
    ifd_size = 2 + 12 * len(entries) + 4
    data_offset = 8 + ifd_size
    body = struct.pack("<H", len(entries))
    for tag, typ, count, value in entries:
        value = data_offset if tag == 273 else value
        body += struct.pack("<HHII", tag, typ, count, value)
    return b"II*\x00" + struct.pack("<I", 8) + body + struct.pack("<I", 0) + bytes(10)


def webp_with_size(w: int, h: int) -> bytes:
    """An extended-format (VP8X) WebP whose canvas is ``w × h`` and which holds no image."""
    vp8x = b"\x00\x00\x00\x00" + (w - 1).to_bytes(3, "little") + (h - 1).to_bytes(3, "little")
    chunk = b"VP8X" + struct.pack("<I", len(vp8x)) + vp8x
    return b"RIFF" + struct.pack("<I", 4 + len(chunk)) + b"WEBP" + chunk


def fits_with_size(w: int, h: int) -> bytes:
    cards = [
        "SIMPLE  =                    T",
        "BITPIX  =                    8",
        "NAXIS   =                    2",
        f"NAXIS1  = {w:>20}",
        f"NAXIS2  = {h:>20}",
        "END",
    ]
    header = "".join(c.ljust(80) for c in cards).ljust(2880).encode("ascii")
    return header + bytes(2880)


def bitflip(data: bytes, rng: random.Random, flips: int, window: int | None = None) -> bytes:
    """``data`` with ``flips`` bits flipped at seeded positions (within the first ``window``)."""
    out = bytearray(data)
    span = min(len(out), window or len(out))
    for _ in range(flips):
        i = rng.randrange(span)
        out[i] ^= 1 << rng.randrange(8)
    return bytes(out)


# --------------------------------------------------------------------------- generators


def valid_controls(rng: random.Random, first: bool) -> list[Case]:
    """Ordinary images that must be accepted."""
    cases = []
    if first:
        rgb = Image.fromarray(_pixels((64, 48), 1))
        cases += [
            _image("control/rgb.png", "rgb.png", "accepted", lambda: encode(rgb, "PNG")),
            _image("control/rgb.jpg", "rgb.jpg", "accepted", lambda: encode(rgb, "JPEG")),
            _image(
                "control/tiny-1x1.png",
                "one.png",
                "accepted",
                lambda: encode(rgb.crop((0, 0, 1, 1)), "PNG"),
            ),
            _image(
                "control/jpeg-named-png",
                "photo.png",
                "accepted",
                lambda: encode(rgb, "JPEG"),
            ),
            _image(
                "control/exif-rotated.jpg",
                "rotated.jpg",
                "accepted",
                lambda: encode(rgb, "JPEG", exif=_exif({0x0112: 6})),
            ),
            _image("control/big-2mp.png", "big.png", "accepted", lambda: zero_png(1600, 1200)),
            _image(
                "control/big-12mp.png",
                "big.png",
                "accepted",
                lambda: zero_png(4000, 3000),
                heavy=True,
            ),
        ]
    w, h = rng.randint(1, 300), rng.randint(1, 300)
    fmt = rng.choice(["png", "jpeg", "bmp", "tiff", "webp", "gif"])
    name, suffix, params = BASE_FORMATS[fmt]
    seed = rng.randrange(1 << 30)

    def random_valid() -> bytes:
        image = Image.fromarray(_pixels((w, h), seed))
        return encode(image.quantize(32) if name == "GIF" else image, name, **params)

    cases.append(
        _image(f"control/{fmt}-{w}x{h}-{seed}", "random" + suffix, "accepted", random_valid)
    )
    return cases


def _ascii_orientation(text: bytes) -> bytes:
    """EXIF whose Orientation tag (0x0112) is ASCII text instead of a SHORT."""
    entry = struct.pack("<HHII", 0x0112, 2, len(text), 8 + 2 + 12 + 4)
    return b"Exif\x00\x00II*\x00" + struct.pack("<IH", 8, 1) + entry + bytes(4) + text


def _exif(tags: dict[int, object]) -> bytes:
    exif = Image.Exif()
    for tag, value in tags.items():
        exif[tag] = value
    return exif.tobytes()


# (mode, PIL format, suffix, expect): every PIL mode, in the formats that store it.
MODES: list[tuple[str, str, str, Expect]] = [
    ("1", "PNG", ".png", "accepted"),
    ("1", "BMP", ".bmp", "accepted"),
    ("L", "PNG", ".png", "accepted"),
    ("L", "JPEG", ".jpg", "accepted"),
    ("LA", "PNG", ".png", "accepted"),
    ("LA", "TIFF", ".tif", "accepted"),
    ("P", "PNG", ".png", "accepted"),
    ("P", "GIF", ".gif", "accepted"),
    ("P", "BMP", ".bmp", "accepted"),
    ("PA", "TIFF", ".tif", "either"),
    ("RGB", "PNG", ".png", "accepted"),
    ("RGB", "TIFF", ".tif", "accepted"),
    ("RGB", "WEBP", ".webp", "accepted"),
    ("RGB", "PPM", ".ppm", "accepted"),
    ("RGBA", "PNG", ".png", "accepted"),
    ("RGBA", "WEBP", ".webp", "accepted"),
    ("RGBA", "TIFF", ".tif", "accepted"),
    ("RGBX", "TIFF", ".tif", "accepted"),
    ("RGBa", "WEBP", ".webp", "accepted"),
    ("CMYK", "JPEG", ".jpg", "accepted"),
    ("CMYK", "TIFF", ".tif", "accepted"),
    ("YCbCr", "JPEG", ".jpg", "accepted"),
    ("YCbCr", "TIFF", ".tif", "accepted"),
    ("LAB", "TIFF", ".tif", "either"),
    ("HSV", "WEBP", ".webp", "accepted"),  # no reader keeps HSV: WebP stores it as RGB
    ("I", "TIFF", ".tif", "accepted"),
    ("I", "PPM", ".pgm", "accepted"),
    ("I;16", "PNG", ".png", "accepted"),
    ("I;16", "TIFF", ".tif", "accepted"),
    ("I;16B", "TIFF", ".tif", "accepted"),
    ("I;16L", "TIFF", ".tif", "accepted"),
    ("F", "TIFF", ".tif", "accepted"),
]


CI_MODES = {
    "1-png",
    "L-jpeg",
    "LA-png",
    "P-png",
    "PA-tiff",
    "RGBA-webp",
    "RGBX-tiff",
    "CMYK-jpeg",
    "YCbCr-tiff",
    "LAB-tiff",
    "HSV-webp",
    "I-tiff",
    "I_16-png",
    "I_16B-tiff",
    "F-tiff",
}


def every_mode(rng: random.Random, first: bool) -> list[Case]:
    """Every PIL mode where a format stores it; palette images with and without transparency."""
    cases = []
    if first:
        for mode, fmt, suffix, expect in MODES:
            slug = mode.replace(";", "_")
            cases.append(
                _image(
                    f"mode/{slug}-{fmt.lower()}",
                    f"{slug}{suffix}",
                    expect,
                    lambda m=mode, f=fmt: encode(_mode_image(m), f),
                    ci=f"{slug}-{fmt.lower()}" in CI_MODES,
                )
            )
        pal = _mode_image("P")
        cases += [
            _image(
                "mode/P-png-transparency-index",
                "p_tr.png",
                "accepted",
                lambda: encode(pal, "PNG", transparency=3),
                ci=False,
            ),
            _image(
                "mode/P-png-transparency-bytes",
                "p_trb.png",
                "accepted",
                lambda: encode(pal, "PNG", transparency=bytes(range(0, 256, 16))),
            ),
            _image(
                "mode/P-gif-transparency",
                "p_tr.gif",
                "accepted",
                lambda: encode(pal, "GIF", transparency=0),
            ),
            _image(
                "mode/L-png-transparency",
                "l_tr.png",
                "accepted",
                lambda: encode(_mode_image("L"), "PNG", transparency=10),
                ci=False,
            ),
            _image(
                "mode/RGB-png-transparency",
                "rgb_tr.png",
                "accepted",
                lambda: encode(_mode_image("RGB"), "PNG", transparency=(1, 2, 3)),
                ci=False,
            ),
        ]
    mode, fmt, suffix, expect = rng.choice(MODES)
    size = (rng.randint(1, 97), rng.randint(1, 97))
    seed = rng.randrange(1 << 30)
    slug = mode.replace(";", "_")
    cases.append(
        _image(
            f"mode/{slug}-{fmt.lower()}-{size[0]}x{size[1]}-{seed}",
            f"{slug}{suffix}",
            expect,
            lambda: encode(_mode_image(mode, size, seed), fmt),
            ci=False,
        )
    )
    return cases


# Formats PIL reads that vitviz may or may not choose to accept; each must end cleanly.
OTHER_FORMATS = [
    ("TGA", ".tga"),
    ("PCX", ".pcx"),
    ("SGI", ".sgi"),
    ("IM", ".im"),
    ("SPIDER", ".spider"),
    ("JPEG2000", ".jp2"),
    ("DDS", ".dds"),
    ("QOI", ".qoi"),
    ("ICNS", ".icns"),
    ("XBM", ".xbm"),
    ("MSP", ".msp"),
    ("AVIF", ".avif"),
    ("BLP", ".blp"),
]


def other_formats(rng: random.Random, first: bool) -> list[Case]:
    """Formats outside the common ones (either way is fine), and stub formats PIL only
    identifies (BUFR, GRIB, HDF5, MPEG, WMF, FITS bomb): refused."""
    if not first:
        return []
    cases = []
    for fmt, suffix in OTHER_FORMATS:
        mode = {"XBM": "1", "MSP": "1", "BLP": "P", "ICNS": "RGBA"}.get(fmt, "RGB")
        size = (64, 64) if fmt == "ICNS" else (40, 30)
        cases.append(
            _image(
                f"format/{fmt.lower()}",
                "image" + suffix,
                "either",
                lambda f=fmt, m=mode, s=size: encode(_mode_image(m, s), f),
                ci=fmt in ("TGA", "SGI", "QOI"),
            )
        )
        cases.append(
            _image(
                f"format/{fmt.lower()}-named-png",
                "image.png",
                "either",
                lambda f=fmt, m=mode, s=size: encode(_mode_image(m, s), f),
                ci=fmt in ("SPIDER", "IM", "JPEG2000"),
            )
        )
    stubs = {
        "bufr": b"BUFR" + bytes(60),
        "grib": b"GRIB\x00\x00\x00\x01" + bytes(60),
        "hdf5": b"\x89HDF\r\n\x1a\n" + bytes(60),
        "mpeg": b"\x00\x00\x01\xb3" + bytes([0x02, 0x80, 0x1E]) + bytes(60),
        "wmf": b"\xd7\xcd\xc6\x9a" + bytes(18) + bytes(60),
        "fits-bomb": fits_with_size(100_000, 100_000),
        "xpm-text": b'/* XPM */\nstatic char *x[] = {\n"2 1 1 1",\n"a c #FF0000",\n"aa"};\n',
        "pbm-plain-text": b"P1\n2 2\n0 1\n1 0\n",
    }
    for key, data in stubs.items():
        expect: Expect = "either" if key in ("xpm-text", "pbm-plain-text") else "refused"
        ci = key in ("bufr", "hdf5", "fits-bomb", "pbm-plain-text")
        cases.append(_image(f"format/{key}-named-png", f"{key}.png", expect, data, ci=ci))
    return cases


def truncated(rng: random.Random, first: bool) -> list[Case]:
    """Each base format cut at seeded points (a short cut must be refused)."""
    cases = []
    keys = list(BASE_FORMATS) if first else rng.sample(list(BASE_FORMATS), 3)
    for key in keys:
        data = base_bytes(key)
        suffix = BASE_FORMATS[key][1]
        for cut in (rng.randrange(1, 24), rng.randrange(24, len(data))):
            expect: Expect = "refused" if cut < len(data) // 2 else "either"
            cases.append(
                _image(
                    f"truncated/{key}-{cut}of{len(data)}",
                    "cut" + suffix,
                    expect,
                    data[:cut],
                    ci=first and (key in ("png", "jpeg") or (cut < 24 and key in ("tiff", "webp"))),
                )
            )
    return cases


def bit_flipped(rng: random.Random, first: bool) -> list[Case]:
    """Each base format with bits flipped in its header or anywhere (either way is fine)."""
    cases = []
    keys = list(BASE_FORMATS) if first else rng.sample(list(BASE_FORMATS), 3)
    for key in keys:
        data = base_bytes(key)
        suffix = BASE_FORMATS[key][1]
        for where, window in (("header", 64), ("anywhere", None)):
            seed = rng.randrange(1 << 30)
            flips = rng.randint(1, 8)
            damaged = bitflip(data, random.Random(seed), flips, window)
            cases.append(
                _image(
                    f"bitflip/{key}-{where}-{flips}x-{seed}",
                    "flipped" + suffix,
                    "either",
                    damaged,
                    ci=first and key in ("png", "jpeg", "tiff"),
                )
            )
    return cases


def not_images(rng: random.Random, first: bool) -> list[Case]:
    """Zero bytes, text, HTML, JSON and random bytes named like images: refused."""
    cases = []
    if first:
        for suffix in (".png", ".jpg", ".tif", ".gif"):
            cases.append(
                _image(
                    f"zero-byte/{suffix[1:]}",
                    "empty" + suffix,
                    "refused",
                    b"",
                    ci=suffix in (".png", ".jpg"),
                )
            )
        texts = {
            "plain-text": b"this is not an image\n" * 20,
            "html": b"<!DOCTYPE html><html><body><img src=x onerror=alert(1)></body></html>\n",
            "json": b'{"image": "no", "size": [100000, 100000]}\n',
            "utf16-text": "not an image".encode("utf-16"),
            "png-signature-only": PNG_SIGNATURE,
            "jpeg-soi-only": b"\xff\xd8\xff",
            "null-bytes": bytes(4096),
        }
        for key, data in texts.items():
            ci = key in ("plain-text", "html", "png-signature-only")
            cases.append(_image(f"text-as-image/{key}", f"{key}.png", "refused", data, ci=ci))
    n = rng.choice([1, 7, 64, 1000, 65536])
    seed = rng.randrange(1 << 30)
    data = random.Random(seed).randbytes(n)
    cases.append(
        _image(f"text-as-image/random-{n}b-{seed}", "noise.png", "refused", data, ci=first)
    )
    return cases


def postscript(rng: random.Random, first: bool) -> list[Case]:
    """PostScript/EPS named like images: refused, and Ghostscript must never start. The content
    would make a real Ghostscript write a file into the case's folder or loop forever."""
    if not first:
        return []

    def ps(body: str, bbox: str = "0 0 16 16", header: str = "%!PS-Adobe-3.0 EPSF-3.0") -> Writer:
        def write(folder: Path) -> Path:
            target = folder / "written-by-ghostscript.txt"
            text = f"{header}\n%%BoundingBox: {bbox}\n" + body.replace("TARGET", str(target))
            path = folder / "picture.png"
            path.write_text(text + "\nshowpage\n%%EOF\n")
            return path

        return write

    writes = "/f (TARGET) (w) file def f (ghostscript ran) writestring f closefile"
    cases = [
        Case("postscript/eps-writes-a-file.png", "image", ps(writes), "refused"),
        Case("postscript/eps-endless-loop.png", "image", ps("{ } loop"), "refused"),
        Case("postscript/plain-ps.png", "image", ps(writes, header="%!PS"), "refused", ci=False),
        Case("postscript/eps-bomb-bbox.png", "image", ps(writes, "0 0 100000 100000"), "refused"),
    ]

    def dos_eps(folder: Path) -> Path:
        body = f"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 16 16\n{writes}\n".replace(
            "TARGET", str(folder / "written-by-ghostscript.txt")
        ).encode()
        header = b"\xc5\xd0\xd3\xc6" + struct.pack("<IIIIIIH", 30, len(body), 0, 0, 0, 0, 0xFFFF)
        path = folder / "dos.png"
        path.write_bytes(header + body)
        return path

    cases.append(Case("postscript/dos-eps-binary.png", "image", dos_eps, "refused"))
    cases.append(
        _image(
            "postscript/pillow-saved-eps.png",
            "saved.png",
            "refused",
            lambda: encode(_mode_image("RGB"), "EPS"),
        )
    )
    for suffix in (".eps", ".jpg"):
        write = ps(writes)

        def renamed(folder: Path, w: Writer = write, s: str = suffix) -> Path:
            return w(folder).rename(folder / ("picture" + s))

        cases.append(
            Case(
                f"postscript/eps-named-{suffix[1:]}",
                "image",
                renamed,
                "refused",
                ci=suffix == ".eps",
            )
        )
    return cases


BOMBS: dict[str, Callable[[int, int], bytes]] = {
    "png": png_with_size,
    "gif": gif_with_size,
    "bmp": bmp_with_size,
    "jpeg": jpeg_with_size,
    "tiff": tiff_with_size,
    "webp": webp_with_size,
}


def bombs(rng: random.Random, first: bool) -> list[Case]:
    """Headers that claim huge sizes (refused before decoding), and sizes just under PIL's limit
    with almost no data (refused as truncated, without decoding 0.5 GB)."""
    cases = []
    if first:
        for key, make in BOMBS.items():
            w, h = (16383, 16383) if key == "webp" else (65500, 65500)
            cases.append(
                _image(
                    f"bomb/{key}-{w}x{h}",
                    f"bomb.{key}.png",
                    "refused",
                    make(w, h),
                    ci=key in ("png", "gif", "jpeg", "webp"),
                )
            )
        cases += [
            _image("bomb/png-100000x100000", "b.png", "refused", png_with_size(100_000, 100_000)),
            _image(
                "bomb/png-rgba-65535", "b.png", "refused", png_with_size(65535, 65535, 6), ci=False
            ),
            _image("bomb/bmp-top-down", "b.bmp", "refused", bmp_with_size(100_000, -100_000)),
            _image(
                "bomb/bmp-1bit-30000", "b.bmp", "refused", bmp_with_size(30000, 30000, 1), ci=False
            ),
            _image("bomb/png-2x-max-width", "b.png", "refused", png_with_size(2**31 - 1, 1)),
            _image(
                "bomb/png-13000x13000-no-data",
                "b.png",
                "refused",
                png_with_size(13000, 13000),
            ),
            _image(
                "bomb/tiff-13000x13000-no-data", "b.tif", "refused", tiff_with_size(13000, 13000)
            ),
        ]
    key = rng.choice(list(BOMBS))
    limit = 16383 if key == "webp" else 65500
    w, h = rng.randint(14000, limit), rng.randint(14000, limit)
    cases.append(
        _image(f"bomb/{key}-{w}x{h}", f"bomb.{key}.png", "refused", BOMBS[key](w, h), ci=False)
    )
    return cases


def thin_and_big(rng: random.Random, first: bool) -> list[Case]:
    """1 × 100000 and 100000 × 1 (may be refused, must not eat memory); large real images."""
    if not first:
        return []
    strip = Image.fromarray(_pixels((100_000, 1), 3))
    column = Image.fromarray(_pixels((1, 100_000), 4))
    return [
        _image("thin/1x100000.png", "thin.png", "either", lambda: encode(column, "PNG")),
        _image("thin/100000x1.png", "wide.png", "either", lambda: encode(strip, "PNG")),
        _image(
            "thin/2x65000.jpg",
            "thin.jpg",
            "either",
            lambda: encode(strip.resize((65000, 2)), "JPEG"),
        ),
        _image(
            "big/80mp-10000x8000.png",
            "huge.png",
            "accepted",
            lambda: zero_png(10000, 8000),
            heavy=True,
        ),
        _image(
            "big/80mp-10000x8000.jpg",
            "huge.jpg",
            "accepted",
            lambda: encode(Image.new("RGB", (10000, 8000), (90, 120, 30)), "JPEG", quality=50),
            heavy=True,
        ),
        _image(
            "big/170mp-png-just-under-limit",
            "huge.png",
            "either",
            lambda: zero_png(14000, 12700),
            heavy=True,
        ),
    ]


def animated(rng: random.Random, first: bool) -> list[Case]:
    """Animated GIF, APNG and WebP (first frame used)."""
    if not first:
        return []
    frames = [Image.fromarray(_pixels((40, 30), s)) for s in range(4)]

    def anim(fmt: str, **kw) -> Callable[[], bytes]:
        def make() -> bytes:
            first_frame, *rest = [f.quantize(32) if fmt == "GIF" else f for f in frames]
            return encode(first_frame, fmt, save_all=True, append_images=rest, **kw)

        return make

    return [
        _image("animated/gif", "anim.gif", "accepted", anim("GIF", duration=50, loop=0)),
        _image(
            "animated/gif-named-png", "anim.png", "accepted", anim("GIF", duration=50), ci=False
        ),
        _image("animated/apng", "anim.png", "accepted", anim("PNG", duration=50)),
        _image("animated/webp", "anim.webp", "accepted", anim("WEBP", duration=50)),
        _image("animated/tiff-multipage", "pages.tif", "accepted", anim("TIFF"), ci=False),
    ]


def broken_exif(rng: random.Random, first: bool) -> list[Case]:
    """EXIF that lies or is garbage: the image is still usable (shown as stored)."""
    rgb = Image.fromarray(_pixels((40, 30), 5))
    cases = []
    if first:
        tiff_loop = b"MM\x00*\x00\x00\x00\x08" + struct.pack(">H", 1)
        tiff_loop += struct.pack(">HHII", 0x0112, 3, 1, 9 << 16) + struct.pack(">I", 8)
        bad = {
            "orientation-9": _exif({0x0112: 9}),
            "orientation-0": _exif({0x0112: 0}),
            "orientation-text": _ascii_orientation(b"upside down\x00"),
            "ifd-loop": b"Exif\x00\x00" + tiff_loop,
            "huge-entry-count": b"Exif\x00\x00II*\x00\x08\x00\x00\x00\xff\xff" + bytes(20),
            "offset-past-end": b"Exif\x00\x00II*\x00\xff\xff\xff\x7f",
            "not-tiff": b"Exif\x00\x00garbage garbage garbage",
        }
        for key, exif in bad.items():
            cases.append(
                _image(
                    f"exif/jpeg-{key}",
                    "exif.jpg",
                    "accepted",
                    lambda e=exif: encode(rgb, "JPEG", exif=e),
                    ci=key in ("orientation-9", "ifd-loop", "huge-entry-count"),
                )
            )
        cases.append(
            _image(
                "exif/png-exif-garbage",
                "exif.png",
                "accepted",
                lambda: encode(rgb, "PNG", exif=b"Exif\x00\x00not tiff at all"),
            )
        )
        cases.append(
            _image(
                "exif/webp-orientation-9",
                "exif.webp",
                "accepted",
                lambda: encode(rgb, "WEBP", exif=_exif({0x0112: 9})),
                ci=False,
            )
        )
    seed = rng.randrange(1 << 30)
    junk = b"Exif\x00\x00" + random.Random(seed).randbytes(rng.randint(1, 512))
    cases.append(
        _image(
            f"exif/jpeg-random-{seed}",
            "exif.jpg",
            "accepted",
            lambda: encode(rgb, "JPEG", exif=junk),
            ci=first,
        )
    )
    return cases


def special_files(rng: random.Random, first: bool) -> list[Case]:
    """Folders, FIFOs, device links, dangling and looping links named like images: refused
    (a FIFO must not block: nobody will ever write to it)."""
    if not first:
        return []

    def folder(f: Path) -> Path:
        (f / "folder.png").mkdir()
        (f / "folder.png" / "inside.png").write_bytes(base_bytes("png"))
        return f / "folder.png"

    def fifo(f: Path) -> Path:
        os.mkfifo(f / "fifo.png")
        return f / "fifo.png"

    def link(target: str, name: str = "link.png") -> Writer:
        def write(f: Path) -> Path:
            (f / name).symlink_to(target)
            return f / name

        return write

    def loop(f: Path) -> Path:
        (f / "a.png").symlink_to(f / "b.png")
        (f / "b.png").symlink_to(f / "a.png")
        return f / "a.png"

    def unreadable(f: Path) -> Path:
        path = f / "locked.png"
        path.write_bytes(base_bytes("png"))
        path.chmod(0)
        return path

    cases = [
        Case("special/folder-named-png", "image", folder, "refused"),
        Case("special/fifo-named-png", "image", fifo, "refused"),
        Case("special/link-to-dev-zero", "image", link("/dev/zero"), "refused"),
        Case("special/link-to-dev-urandom", "image", link("/dev/urandom"), "refused"),
        Case("special/dangling-link", "image", link("/nonexistent/vitviz-fuzz.png"), "refused"),
        Case("special/link-loop", "image", loop, "refused"),
        Case("special/missing-file", "image", lambda f: f / "missing.png", "refused"),
    ]
    if os.geteuid() != 0:  # root reads a mode-0 file anyway
        cases.append(Case("special/unreadable-file", "image", unreadable, "refused"))
    return cases


def odd_names(rng: random.Random, first: bool) -> list[Case]:
    """Non-UTF-8 (bytes) names and names with control characters, valid and not: the name must
    not break a message into several lines or make the program fail."""
    if not first:
        return []
    cases = []
    names = {
        "latin1": b"caf\xe9.png",
        "invalid-utf8": b"\xff\xfe-bild.png",
        "lone-surrogate-bytes": b"\xed\xa0\x80.png",
        "newline": b"two\nlines.png",
        "escape-sequence": b"\x1b[2Jclear.png",
        "long-255": b"a" * 251 + b".png",
        "leading-dash": b"-h.png",
    }
    for key, raw in names.items():
        name = os.fsdecode(raw)
        ci_valid = key in ("latin1", "invalid-utf8", "newline", "long-255")
        ci_invalid = key in ("invalid-utf8", "newline", "escape-sequence")
        cases.append(_image(f"names/{key}-valid", name, "accepted", base_bytes("png"), ci=ci_valid))
        cases.append(
            _image(f"names/{key}-not-an-image", name, "refused", b"not an image", ci=ci_invalid)
        )
    return cases


IMAGE_GENERATORS = [
    valid_controls,
    every_mode,
    other_formats,
    truncated,
    bit_flipped,
    not_images,
    postscript,
    bombs,
    thin_and_big,
    animated,
    broken_exif,
    special_files,
    odd_names,
]
