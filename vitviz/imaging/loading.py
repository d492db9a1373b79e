"""Load an image vitviz reads into a plain 8-bit RGB picture, or refuse it with a clear message.

Only the formats of ``FORMATS`` are ever tried (Pillow's ``Image.open(..., formats=...)``):
each is decoded inside this process by Pillow's own code. Formats Pillow hands to another
program (EPS/PostScript through Ghostscript) or only identifies are never tried, whatever the
file is called; such a file is refused, naming the format its first bytes show where they show
one. A path is opened only when it is a regular file (a FIFO named ``.png`` can't block).

Every source (path, bytes, file object, PIL image, numpy array) ends as a fully decoded
``PIL.Image.Image`` in mode ``"RGB"`` with its EXIF orientation applied, reduced in size on
request (``max_side``, ``min_size``: JPEG's DCT scaling while decoding, then an
antialiased bicubic resize). The file on disk is only ever opened for reading.
"""

from __future__ import annotations

import io
import logging
import math
import os
import re
import stat
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
from PIL import Image, ImageFile, UnidentifiedImageError

from vitviz.core.errors import VitvizError
from vitviz.core.image_formats import ACCEPTED as ACCEPTED  # re-exported
from vitviz.core.image_formats import FORMATS as FORMATS  # re-exported
from vitviz.core.image_formats import IMAGE_EXTENSIONS as IMAGE_EXTENSIONS  # re-exported
from vitviz.core.image_formats import OPENED_AS, PIL_FORMATS, sniff_format
from vitviz.core.image_formats import is_image_path as is_image_path  # re-exported
from vitviz.core.printable import display_name

__all__ = [
    "ACCEPTED",
    "DEFAULT_MAX_PIXELS",
    "FORMATS",
    "FULL_SIZE",
    "IMAGE_EXTENSIONS",
    "ImageLoadError",
    "ImageSource",
    "SizeRule",
    "display_name",
    "full_size",
    "is_image_path",
    "list_images",
    "load_image",
    "sniff_format",
    "to_rgb",
]

#: Twice PIL's own warning threshold, i.e. PIL's hard limit (about 179 megapixels).
DEFAULT_MAX_PIXELS = 178_956_970

_HEAD_BYTES = 64

ImageSource = (
    str | os.PathLike | bytes | bytearray | memoryview | BinaryIO | Image.Image | np.ndarray
)

#: A smallest size (H, W), or a function of the source's (H, W) that gives one.
SizeRule = tuple[int, int] | Callable[[tuple[int, int]], tuple[int, int]]


# Pillow logs what it finds wrong in a file (e.g. a TIFF's sample count) and Python would print
# that on stderr when nothing else listens; each such problem becomes an ImageLoadError instead.
# An application that configures logging still gets the records.
logging.getLogger("PIL").addHandler(logging.NullHandler())


class ImageLoadError(VitvizError):
    """An input that is not a usable image; the message is a plain sentence for the user."""


def _natural_key(path: Path) -> tuple:
    """Sort key that orders embedded numbers by value: img2 before img10."""
    parts = re.split(r"(\d+)", path.name.casefold())
    return tuple((0, int(p), p) if p.isdigit() else (1, 0, p) for p in parts), path.name


MASK_SUFFIX = "_mask.png"  # <stem>_mask.png beside <stem>.*: that image's object mask


def list_images(folder: str | os.PathLike) -> list[Path]:
    """Image files directly in ``folder`` (not recursive, no hidden files), natural order;
    ``<stem>_mask.png`` beside an image ``<stem>.*`` is that image's mask and not listed."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ImageLoadError(
            f"{display_name(folder)} is not a folder. Choose a folder that holds images."
        )
    found = [
        p
        for p in folder.iterdir()
        if not p.name.startswith(".") and is_image_path(p) and p.is_file()
    ]
    stems = {p.stem for p in found}
    masks = {
        p for p in found if p.name.endswith(MASK_SUFFIX) and p.name[: -len(MASK_SUFFIX)] in stems
    }
    return sorted((p for p in found if p not in masks), key=_natural_key)


# --------------------------------------------------------------------------- mode conversion


def _scale_to_uint8(values: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Map ``[lo, hi]`` linearly onto 0..255 (rounded, clipped); NaN becomes 0."""
    span = hi - lo
    if span <= 0:
        return np.zeros(values.shape, dtype=np.uint8)
    scaled = (values.astype(np.float64) - lo) * (255.0 / span)
    scaled = np.nan_to_num(scaled, nan=0.0, posinf=255.0, neginf=0.0)
    return np.clip(np.rint(scaled), 0, 255).astype(np.uint8)


def _gray_to_rgb(gray: np.ndarray) -> Image.Image:
    """(H, W) uint8 -> RGB image."""
    return Image.fromarray(np.repeat(gray[:, :, None], 3, axis=2), mode="RGB")


def _wide_gray_to_rgb(image: Image.Image) -> Image.Image:
    """16-bit, 32-bit integer or float grayscale -> RGB, scaled by the range of the data type.

    - ``I;16*``: 0..65535 -> 0..255 (v / 257).
    - ``I``: treated as 16-bit when all values lie in 0..65535, else stretched min..max.
    - ``F``: 0..1 when all finite values lie there, else 0..255 when they lie there, else
      stretched min..max. NaN becomes black.
    """
    values = np.asarray(image)
    if image.mode.startswith("I;16"):
        return _gray_to_rgb(_scale_to_uint8(values, 0.0, 65535.0))
    finite = values[np.isfinite(values)] if values.dtype.kind == "f" else values
    lo = float(finite.min()) if finite.size else 0.0
    hi = float(finite.max()) if finite.size else 0.0
    if image.mode == "I":
        if lo >= 0 and hi <= 65535:
            return _gray_to_rgb(_scale_to_uint8(values, 0.0, 65535.0))
        return _gray_to_rgb(_scale_to_uint8(values, lo, hi))
    if lo >= 0 and hi <= 1:
        return _gray_to_rgb(_scale_to_uint8(values, 0.0, 1.0))
    if lo >= 0 and hi <= 255:
        return _gray_to_rgb(_scale_to_uint8(values, 0.0, 255.0))
    return _gray_to_rgb(_scale_to_uint8(values, lo, hi))


def to_rgb(image: Image.Image) -> Image.Image:
    """Convert any PIL mode to ``"RGB"`` (a new image; alpha dropped like ``convert("RGB")``)."""
    mode = image.mode
    if mode == "RGB":
        return image.copy()
    if mode.startswith("I;16") or mode in ("I", "F"):
        return _wide_gray_to_rgb(image)
    if mode == "P" and "transparency" in image.info:
        # Direct P -> RGB warns for byte-string transparency; via RGBA gives the same colours.
        return image.convert("RGBA").convert("RGB")
    try:
        return image.convert("RGB")
    except ValueError:
        return image.convert("RGBA").convert("RGB")


# --------------------------------------------------------------------------- reduction

#: Key of ``Image.info`` where ``load_image`` leaves the (H, W) of the whole, upright picture.
FULL_SIZE = "vitviz.full_size"

#: Pillow's reducing_gap for the reduction resize: box-reduce by whole factors only while the
#: result stays this many times the target, then bicubic (Pillow: 3 is close to a full resize).
RESIZE_REDUCING_GAP = 3.0

# EXIF orientation -> the transpose that shows the image upright (as ImageOps.exif_transpose).
_TRANSPOSE = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}


@dataclass(frozen=True)
class _Reduction:
    """At most ``max_side`` on the long side, never below ``min_size`` (H, W) on either side."""

    max_side: int | None
    min_size: SizeRule | None

    def target(self, size: tuple[int, int], orientation: int) -> tuple[int, int] | None:
        """(W, H) as stored to reduce a stored (W, H) image to, or None to keep it as it is."""
        turned = orientation in (5, 6, 7, 8)
        w, h = (size[1], size[0]) if turned else size  # upright W, H
        scale = 1.0
        if self.max_side is not None and max(w, h) > self.max_side:
            scale = self.max_side / max(w, h)
        mh = mw = 0
        if self.min_size is not None:
            mh, mw = self.min_size((h, w)) if callable(self.min_size) else self.min_size
            scale = max(scale, mh / h, mw / w)
        if scale >= 1.0:
            return None
        tw = min(w, max(1, round(w * scale), math.ceil(mw)))
        th = min(h, max(1, round(h * scale), math.ceil(mh)))
        if (tw, th) == (w, h):
            return None
        return (th, tw) if turned else (tw, th)


def _reduction(max_side: int | None, min_size: SizeRule | None) -> _Reduction | None:
    if max_side is None and min_size is None:
        return None
    if max_side is not None and (isinstance(max_side, bool) or int(max_side) < 1):
        raise ValueError(f"max_side must be a positive number of pixels, got {max_side!r}")
    return _Reduction(None if max_side is None else int(max_side), min_size)


def _orientation(image: Image.Image) -> int:
    """The EXIF orientation 1..8 (1 for none, or for EXIF that can't be read)."""
    try:
        value = image.getexif().get(0x0112, 1)
    except Exception:  # noqa: BLE001 - broken EXIF: show the image as stored
        return 1
    return value if isinstance(value, int) and value in range(1, 9) else 1


def _draft(
    image: Image.Image, rule: _Reduction
) -> tuple[tuple[int, int], tuple[float, float, float, float]] | None:
    """Let a JPEG decode at 1/2, 1/4 or 1/8 scale (DCT scaling) when that is still at least the
    target size. Returns the target (W, H) and the box of the whole picture in the decoded
    pixels, or None when the image is decoded as it is."""
    if image.format not in ("JPEG", "MPO"):
        return None
    target = rule.target(image.size, _orientation(image))
    if target is None:
        return None
    drafted = image.draft(image.mode, target)
    return None if drafted is None else (target, drafted[1])


def _reduce(
    image: Image.Image,
    target: tuple[int, int] | None,
    box: tuple[float, float, float, float] | None,
) -> Image.Image:
    """``image`` resized to ``target`` (W, H) from ``box`` (default: all of it); itself when
    there is nothing to do. Odd modes become RGB first, so the result is what reducing the
    RGB picture gives."""
    if target is None or (box is None and image.size == target):
        return image
    base = image if image.mode in ("RGB", "L") else to_rgb(image)
    return base.resize(target, Image.Resampling.BICUBIC, box=box, reducing_gap=RESIZE_REDUCING_GAP)


# --------------------------------------------------------------------------- decoding


def _bomb_message(name: str, size: tuple[int, int] | None, limit: int) -> str:
    shown = f"{size[0]}×{size[1]} pixels" if size else "larger than allowed"
    return (
        f"{name} is {shown}, more than the limit of {limit:,} pixels "
        f"(it could be a decompression bomb). Accepted: images up to {limit:,} pixels."
    )


def _header_size(stream: BinaryIO) -> tuple[int, int] | None:
    """(W, H) from the image header, read by the accepted formats' plugins without Pillow's
    size check. Used only to name the size of an image Pillow refused as a decompression bomb.
    """
    try:
        stream.seek(0)
        prefix = stream.read(16)
        for fmt in PIL_FORMATS:
            factory, accept = Image.OPEN[fmt]
            verdict = True if accept is None else accept(prefix)
            if isinstance(verdict, str) or not verdict:
                continue
            stream.seek(0)
            try:
                return tuple(factory(stream, None).size)  # type: ignore[return-value]
            except Exception:  # noqa: BLE001 - a format plugin that rejects the header
                continue
    except Exception:  # noqa: BLE001 - an unreadable header: let the decoder say why
        return None
    return None


def _unidentified_message(stream: BinaryIO, name: str) -> str:
    """Why ``Image.open`` found no accepted format: the format the header shows, if any."""
    try:
        stream.seek(0)
        head = stream.read(_HEAD_BYTES)
    except Exception:  # noqa: BLE001 - unreadable: say only that it is not an image
        head = b""
    found = sniff_format(head)
    if found is None:
        return f"{name} is not an image vitviz reads. {ACCEPTED}."
    label, accepted = found
    if accepted:
        return (
            f"{name} starts like a {label} file but its header could not be read; the file may "
            f"be truncated or corrupt. {ACCEPTED}."
        )
    return f"{name} holds {label} data, which vitviz does not open. {ACCEPTED}."


@contextmanager
def _quiet() -> Iterator[None]:
    """Silence PIL's decoding warnings (bomb size, corrupt EXIF, ...): each problem that matters
    becomes an ``ImageLoadError`` instead, and nothing else has a reader.

    ``catch_warnings`` swaps process-wide filters, so a warning raised by another thread in the
    same instant may be hidden too; that is harmless here.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _check_size(name: str, size: tuple[int, int], max_pixels: int) -> None:
    if size[0] * size[1] > max_pixels:
        raise ImageLoadError(_bomb_message(name, size, max_pixels))
    if size[0] < 1 or size[1] < 1:
        raise ImageLoadError(f"{name} has no pixels ({size[0]}×{size[1]}). {ACCEPTED}.")


def _finish(
    image: Image.Image,
    rule: _Reduction | None,
    owned: bool,
    stored: tuple[int, int] | None = None,
    drafted: tuple[tuple[int, int], tuple[float, float, float, float]] | None = None,
) -> Image.Image:
    """Decoded image -> reduced, upright RGB image, its full size in ``info[FULL_SIZE]``.

    ``owned``: ``image`` may be returned as it is (else a copy is made). ``stored``: the
    picture's (W, H) as stored (default: the image's). ``drafted``: the target (W, H) of a JPEG
    decoded at a reduced scale, and the box of its pixels that shows the whole picture.
    """
    orientation = _orientation(image)
    w, h = stored or image.size
    if drafted is not None:
        target, box = drafted
    else:
        target = None if rule is None else rule.target((w, h), orientation)
        box = None
    reduced = _reduce(image, target, box)
    if reduced.mode != "RGB":
        rgb = to_rgb(reduced)
    else:  # copied only when it is still the caller's image
        rgb = reduced if owned or reduced is not image else reduced.copy()
    if orientation in _TRANSPOSE:
        rgb = rgb.transpose(_TRANSPOSE[orientation])
    rgb.info[FULL_SIZE] = (w, h) if orientation in (5, 6, 7, 8) else (h, w)
    return rgb


def full_size(image: Image.Image) -> tuple[int, int]:
    """(H, W) of the whole picture an image from ``load_image`` shows: larger than the image
    when it was reduced while decoding, else its own size."""
    size = image.info.get(FULL_SIZE)
    if isinstance(size, tuple) and len(size) == 2 and all(isinstance(v, int) for v in size):
        return size
    return image.height, image.width


def _decode_stream(
    stream: BinaryIO, name: str, max_pixels: int, rule: _Reduction | None
) -> Image.Image:
    """Open (accepted formats only), check the header size, decode, reduce and convert."""
    pil_limit = Image.MAX_IMAGE_PIXELS
    try:
        with _quiet(), Image.open(stream, formats=PIL_FORMATS) as image:
            _check_size(name, image.size, max_pixels)
            stored = image.size
            drafted = None if rule is None else _draft(image, rule)
            image.load()
            _check_size(name, image.size, max_pixels)
            return _finish(image, rule, owned=True, stored=stored, drafted=drafted)
    except ImageLoadError:
        raise
    except Image.DecompressionBombError as exc:
        limit = min(max_pixels, 2 * pil_limit) if pil_limit else max_pixels
        with _quiet():
            size = _header_size(stream)
        raise ImageLoadError(_bomb_message(name, size, limit)) from exc
    except UnidentifiedImageError as exc:
        raise ImageLoadError(_unidentified_message(stream, name)) from exc
    except MemoryError as exc:
        raise ImageLoadError(
            f"{name} is too large to decode in the memory available. {ACCEPTED}."
        ) from exc
    except Exception as exc:
        reason = str(exc).strip().rstrip(".") or type(exc).__name__
        raise ImageLoadError(
            f"{name} could not be decoded; the file may be truncated or corrupt ({reason}). "
            f"{ACCEPTED}."
        ) from exc


def _from_array(array: np.ndarray, max_pixels: int, rule: _Reduction | None) -> Image.Image:
    """uint8 array (H, W), (H, W, 1), (H, W, 3) or (H, W, 4) -> RGB image."""
    if array.dtype != np.uint8:
        raise ImageLoadError(
            f"The array has dtype {array.dtype}. Accepted: uint8 arrays of shape (H, W), "
            "(H, W, 3) or (H, W, 4)."
        )
    if array.ndim == 3 and array.shape[2] == 1:
        array = array[:, :, 0]
    if array.ndim not in (2, 3) or (array.ndim == 3 and array.shape[2] not in (3, 4)):
        raise ImageLoadError(
            f"The array has shape {tuple(array.shape)}. Accepted: uint8 arrays of shape (H, W), "
            "(H, W, 3) or (H, W, 4)."
        )
    _check_size("The array", (array.shape[1], array.shape[0]), max_pixels)
    array = np.ascontiguousarray(array)
    mode = {2: "L", 3: "RGB", 4: "RGBA"}[array.ndim if array.ndim == 2 else array.shape[2]]
    # owned: an RGB image never shares the array's memory (Pillow keeps 4 bytes a pixel), and
    # the other modes are converted to a new RGB image.
    return _finish(Image.fromarray(array, mode=mode), rule, owned=True)


def _from_pil(image: Image.Image, max_pixels: int, rule: _Reduction | None) -> Image.Image:
    """A PIL image given by the caller (never changed). One opened from a file and not yet
    decoded is decoded only when it is one of the accepted formats."""
    _check_size("The image", image.size, max_pixels)
    fmt = getattr(image, "format", None)
    if isinstance(image, ImageFile.ImageFile) and image.tile and fmt not in OPENED_AS:
        label = "EPS (PostScript)" if fmt == "EPS" else str(fmt)
        raise ImageLoadError(
            f"The image holds {label} data, which vitviz does not open. {ACCEPTED}."
        )
    try:
        with _quiet():
            image.load()
            return _finish(image, rule, owned=False)
    except ImageLoadError:
        raise
    except Exception as exc:
        raise ImageLoadError(f"The image could not be decoded ({exc}). {ACCEPTED}.") from exc


_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a device"),
    (stat.S_ISBLK, "a device"),
)


def _not_a_file(path: Path, mode: int) -> ImageLoadError:
    if stat.S_ISDIR(mode):
        return ImageLoadError(f"{display_name(path)} is a folder, not an image file. {ACCEPTED}.")
    kind = next((text for test, text in _KINDS if test(mode)), "not a regular file")
    return ImageLoadError(f"{display_name(path.name or path)} is {kind}, not an image file.")


def _from_path(path: Path, max_pixels: int, rule: _Reduction | None) -> Image.Image:
    name = display_name(path.name or path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError as exc:
        raise ImageLoadError(
            f"{display_name(path)} does not exist. Choose an existing image file."
        ) from exc
    except OSError as exc:
        raise ImageLoadError(f"{name} could not be read ({exc.strerror or exc}).") from exc
    if not stat.S_ISREG(mode):
        raise _not_a_file(path, mode)
    try:
        # Non-blocking, so a file swapped for a FIFO since the check can't hang the open.
        nonblocking = getattr(os, "O_NONBLOCK", 0)
        fd = os.open(path, os.O_RDONLY | nonblocking | getattr(os, "O_BINARY", 0))
        with open(fd, "rb") as stream:
            info = os.fstat(stream.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise _not_a_file(path, info.st_mode)
            if nonblocking:
                os.set_blocking(stream.fileno(), True)
            if info.st_size == 0:
                raise ImageLoadError(f"{name} is empty (0 bytes). {ACCEPTED}.")
            return _decode_stream(stream, name, max_pixels, rule)
    except OSError as exc:
        raise ImageLoadError(f"{name} could not be read ({exc.strerror or exc}).") from exc


def load_image(
    source: ImageSource,
    *,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    max_side: int | None = None,
    min_size: SizeRule | None = None,
) -> Image.Image:
    """Load ``source`` as a fully decoded, EXIF-oriented ``"RGB"`` image.

    ``source``: a path, raw ``bytes``, a binary file object, a ``PIL.Image.Image`` or a uint8
    array (H, W) / (H, W, 3) / (H, W, 4). Files are opened as one of ``FORMATS`` only. Images
    over ``max_pixels`` pixels are refused from their header, before decoding (PIL's own hard
    limit, about 179 MP, still applies).

    Reduction: with ``max_side`` the result is at most that many pixels on its long side, but
    never smaller than ``min_size`` (H, W of the upright image; or a function of the upright
    source's (H, W) giving it) on either side; the aspect ratio is kept. A JPEG is decoded at
    1/2, 1/4 or 1/8 scale when that is still at least the result's size, then resized
    (antialiased bicubic). Without either the image keeps its size; ``max_side=1`` with
    ``min_size``: as small as ``min_size`` allows. ``full_size(result)`` gives the (H, W) of
    the whole picture (plan the model input on it: ``prepare_image(..., full_size=...)``).

    Raises ``ImageLoadError`` with a user-facing message for anything that is not a usable image.
    """
    rule = _reduction(max_side, min_size)
    if isinstance(source, Image.Image):
        return _from_pil(source, max_pixels, rule)
    if isinstance(source, np.ndarray):
        return _from_array(source, max_pixels, rule)
    if isinstance(source, (bytes, bytearray, memoryview)):
        if len(source) == 0:
            raise ImageLoadError(f"The data is empty (0 bytes). {ACCEPTED}.")
        return _decode_stream(io.BytesIO(bytes(source)), "The data", max_pixels, rule)
    if isinstance(source, (str, os.PathLike)):
        return _from_path(Path(source), max_pixels, rule)
    if hasattr(source, "read"):
        raw_name = getattr(source, "name", "")
        name = display_name(Path(raw_name).name) if isinstance(raw_name, str) else ""
        name = name or "The image"
        data = source.read()
        if not data:
            raise ImageLoadError(f"{name} is empty (0 bytes). {ACCEPTED}.")
        return _decode_stream(io.BytesIO(data), name, max_pixels, rule)
    raise TypeError(
        "load_image expects a path, bytes, a binary file, a PIL image or a uint8 numpy array, "
        f"not {type(source).__name__}"
    )
