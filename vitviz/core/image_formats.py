"""The image formats vitviz opens and how a file's first bytes name its format: what telling an
image from a checkpoint needs, without decoding anything (the decoding is ``vitviz.imaging``)."""

from __future__ import annotations

import os
from pathlib import Path

from PIL import Image, features

#: The formats vitviz opens: Pillow's name -> the name messages use. All are decoded by Pillow
#: itself, in this process; nothing here needs another program.
FORMATS: dict[str, str] = {
    "PNG": "PNG",
    "JPEG": "JPEG",
    "BMP": "BMP",
    "GIF": "GIF",
    "TIFF": "TIFF",
    "WEBP": "WebP",
    "PPM": "PPM/PGM/PBM",
    "ICO": "ICO",
}

Image.init()  # register every plugin once, so the lists below are complete
#: What ``Image.open`` may try, in this order (a format this Pillow build lacks is left out).
PIL_FORMATS: tuple[str, ...] = tuple(
    f for f in FORMATS if f in Image.OPEN and (f != "WEBP" or features.check_module("webp"))
)
# PIL images handed in already open: Pillow opens multi-picture JPEGs (phones) as "MPO".
OPENED_AS = frozenset({*PIL_FORMATS, "MPO"})

_LABELS = [FORMATS[f] for f in PIL_FORMATS]
ACCEPTED = f"Accepted: {', '.join(_LABELS[:-1])} and {_LABELS[-1]} images"

#: Lower-case suffixes Pillow registers for the formats above (".png", ".jpg", ".tif", ...).
IMAGE_EXTENSIONS: frozenset[str] = frozenset(
    ext.lower() for ext, fmt in Image.registered_extensions().items() if fmt in PIL_FORMATS
)

# Formats vitviz refuses, recognised by their first bytes (offset, signature, name). Only
# distinctive signatures: a name is given only where the header really says it.
_FOREIGN: tuple[tuple[int, bytes, str], ...] = (
    (0, b"%!PS", "EPS (PostScript)"),
    (0, b"\xc5\xd0\xd3\xc6", "EPS (PostScript)"),
    (0, b"%PDF-", "PDF"),
    (0, b"8BPS", "PSD (Photoshop)"),
    (0, b"gimp xcf", "XCF (GIMP)"),
    (0, b"\x00\x00\x00\x0cjP  \r\n\x87\n", "JPEG 2000"),
    (0, b"\xff\x4f\xff\x51", "JPEG 2000"),
    (0, b"\x00\x00\x00\x0cJXL \r\n\x87\n", "JPEG XL"),
    (4, b"ftypheic", "HEIC"),
    (4, b"ftypheix", "HEIC"),
    (4, b"ftypmif1", "HEIF"),
    (4, b"ftypavif", "AVIF"),
    (4, b"ftypavis", "AVIF"),
    (0, b"icns", "ICNS"),
    (0, b"DDS ", "DDS"),
    (0, b"qoif", "QOI"),
    (0, b"v/1\x01", "OpenEXR"),
    (0, b"SIMPLE  =", "FITS"),
    (0, b"\x89HDF\r\n\x1a\n", "HDF5"),
    (0, b"BUFR", "BUFR"),
    (0, b"GRIB", "GRIB"),
    (0, b"\xd7\xcd\xc6\x9a", "WMF"),
    (40, b" EMF", "EMF"),
    (0, b"\x00\x00\x01\xb3", "MPEG video"),
    (0, b"\x00\x00\x01\xba", "MPEG video"),
    (0, b"PK\x03\x04", "ZIP"),
    (0, b"\x1f\x8b", "gzip"),
)


def is_image_path(path: str | os.PathLike) -> bool:
    """True when the file name has a suffix of a format vitviz reads (no file access)."""
    return Path(path).suffix.lower() in IMAGE_EXTENSIONS


def sniff_format(head: bytes) -> tuple[str, bool] | None:
    """(name, accepted) of the format the first bytes of a file show, or None.

    ``accepted``: one of ``FORMATS`` (by Pillow's own signature check); otherwise a format
    vitviz refuses, from a table of distinctive signatures. Nothing is decoded.
    """
    for fmt in PIL_FORMATS:
        accept = Image.OPEN[fmt][1]
        verdict = False if accept is None else accept(head)
        if verdict and not isinstance(verdict, str):  # a str: "known, but not built in"
            return FORMATS[fmt], True
    for offset, magic, name in _FOREIGN:
        if head[offset : offset + len(magic)] == magic:
            return name, False
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    if text.startswith((b"<?xml", b"<svg")) and b"<svg" in text:
        return "SVG", False
    if text.startswith((b"<!doctype html", b"<html")):
        return "HTML", False
    return None
