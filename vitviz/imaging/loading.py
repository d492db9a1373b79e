"""Load any image PIL can read into a plain 8-bit RGB picture, or refuse it with a clear message.

Every source (path, bytes, file object, PIL image, numpy array) ends as a fully decoded
``PIL.Image.Image`` in mode ``"RGB"`` with its EXIF orientation applied. The file on disk is
only ever opened for reading.
"""

from __future__ import annotations

import io
import os
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

__all__ = [
    "DEFAULT_MAX_PIXELS",
    "IMAGE_EXTENSIONS",
    "ImageLoadError",
    "ImageSource",
    "is_image_path",
    "list_images",
    "load_image",
    "to_rgb",
]

#: Twice PIL's own warning threshold, i.e. PIL's hard limit (about 179 megapixels).
DEFAULT_MAX_PIXELS = 178_956_970

ACCEPTED = "Accepted: PNG, JPEG, BMP, GIF, TIFF, WebP, PPM/PGM, ICO and other formats PIL can read"

# Suffixes PIL registers for formats that need an external program or only identify a file.
_UNUSABLE = frozenset(
    {".bufr", ".grib", ".h5", ".hdf", ".eps", ".ps", ".mpeg", ".mpg", ".emf", ".wmf"}
)


def _readable_extensions() -> frozenset[str]:
    """Lower-case suffixes of the formats this PIL build can decode."""
    registered = Image.registered_extensions()
    found = {ext.lower() for ext, fmt in registered.items() if fmt in Image.OPEN}
    return frozenset(found - _UNUSABLE)


IMAGE_EXTENSIONS: frozenset[str] = _readable_extensions()

ImageSource = (
    str | os.PathLike | bytes | bytearray | memoryview | BinaryIO | Image.Image | np.ndarray
)


class ImageLoadError(ValueError):
    """An input that is not a usable image; the message is a plain sentence for the user."""


def is_image_path(path: str | os.PathLike) -> bool:
    """True when the file name has a suffix of an image format PIL reads (no file access)."""
    return Path(path).suffix.lower() in IMAGE_EXTENSIONS


def _natural_key(path: Path) -> tuple:
    """Sort key that orders embedded numbers by value: img2 before img10."""
    parts = re.split(r"(\d+)", path.name.casefold())
    return tuple((0, int(p), p) if p.isdigit() else (1, 0, p) for p in parts), path.name


def list_images(folder: str | os.PathLike) -> list[Path]:
    """Image files directly in ``folder`` (not recursive, no hidden files), natural order."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ImageLoadError(f"{folder} is not a folder. Choose a folder that holds images.")
    found = [
        p
        for p in folder.iterdir()
        if not p.name.startswith(".") and is_image_path(p) and p.is_file()
    ]
    return sorted(found, key=_natural_key)


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


# --------------------------------------------------------------------------- decoding


def _bomb_message(name: str, size: tuple[int, int] | None, limit: int) -> str:
    shown = f"{size[0]}×{size[1]} pixels" if size else "larger than allowed"
    return (
        f"{name} is {shown}, more than the limit of {limit:,} pixels "
        f"(it could be a decompression bomb). Accepted: images up to {limit:,} pixels."
    )


def _header_size(stream: BinaryIO) -> tuple[int, int] | None:
    """(W, H) from the image header, read by PIL's format plugins without its size check.

    Used only to name the size of an image PIL itself refused as a decompression bomb.
    """
    try:
        stream.seek(0)
        prefix = stream.read(16)
        for fmt in Image.ID:
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


def _quiet() -> warnings.catch_warnings:
    """Silence PIL's decoding warnings (bomb size, corrupt EXIF, ...): each problem that matters
    becomes an ``ImageLoadError`` instead, and nothing else has a reader.

    ``catch_warnings`` swaps process-wide filters, so a warning raised by another thread in the
    same instant may be hidden too; that is harmless here.
    """
    guard = warnings.catch_warnings()
    guard.__enter__()
    guard.__exit__(None, None, None)
    return guard


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


def _orient(image: Image.Image) -> Image.Image:
    """Apply the EXIF orientation; a broken EXIF block leaves the image as stored."""
    try:
        return ImageOps.exif_transpose(image)
    except Exception:  # noqa: BLE001 - broken EXIF: show the image as stored
        return image


def _finish(image: Image.Image, name: str, max_pixels: int) -> Image.Image:
    """Decoded PIL image -> oriented RGB copy."""
    _check_size(name, image.size, max_pixels)
    return to_rgb(_orient(image))


def _decode_stream(stream: BinaryIO, name: str, max_pixels: int) -> Image.Image:
    """Open, check the header size, decode and convert one image from a binary stream."""
    pil_limit = Image.MAX_IMAGE_PIXELS
    try:
        with _quiet(), Image.open(stream) as image:
            _check_size(name, image.size, max_pixels)
            image.load()
            return _finish(image, name, max_pixels)
    except ImageLoadError:
        raise
    except Image.DecompressionBombError as exc:
        limit = min(max_pixels, 2 * pil_limit) if pil_limit else max_pixels
        with _quiet():
            size = _header_size(stream)
        raise ImageLoadError(_bomb_message(name, size, limit)) from exc
    except UnidentifiedImageError as exc:
        raise ImageLoadError(f"{name} is not an image PIL can read. {ACCEPTED}.") from exc
    except Exception as exc:
        reason = str(exc).strip().rstrip(".") or type(exc).__name__
        raise ImageLoadError(
            f"{name} could not be decoded; the file may be truncated or corrupt ({reason}). "
            f"{ACCEPTED}."
        ) from exc


def _from_array(array: np.ndarray, max_pixels: int) -> Image.Image:
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
    return to_rgb(Image.fromarray(array, mode=mode))


def _from_path(path: Path, max_pixels: int) -> Image.Image:
    name = path.name or str(path)
    if not path.exists():
        raise ImageLoadError(f"{path} does not exist. Choose an existing image file.")
    if path.is_dir():
        raise ImageLoadError(f"{path} is a folder, not an image file. {ACCEPTED}.")
    try:
        with path.open("rb") as stream:
            if path.stat().st_size == 0:
                raise ImageLoadError(f"{name} is empty (0 bytes). {ACCEPTED}.")
            return _decode_stream(stream, name, max_pixels)
    except OSError as exc:
        raise ImageLoadError(f"{name} could not be read ({exc.strerror or exc}).") from exc


def load_image(source: ImageSource, *, max_pixels: int = DEFAULT_MAX_PIXELS) -> Image.Image:
    """Load ``source`` as a fully decoded, EXIF-oriented ``"RGB"`` image.

    ``source``: a path, raw ``bytes``, a binary file object, a ``PIL.Image.Image`` or a uint8
    array (H, W) / (H, W, 3) / (H, W, 4). Images over ``max_pixels`` pixels are refused from
    their header, before decoding (PIL's own hard limit, about 179 MP, still applies).
    Raises ``ImageLoadError`` with a user-facing message for anything that is not a usable image.
    """
    if isinstance(source, Image.Image):
        _check_size("The image", source.size, max_pixels)
        try:
            with _quiet():
                source.load()
                return _finish(source, "The image", max_pixels)
        except ImageLoadError:
            raise
        except Exception as exc:
            raise ImageLoadError(f"The image could not be decoded ({exc}). {ACCEPTED}.") from exc
    if isinstance(source, np.ndarray):
        return _from_array(source, max_pixels)
    if isinstance(source, (bytes, bytearray, memoryview)):
        if len(source) == 0:
            raise ImageLoadError(f"The data is empty (0 bytes). {ACCEPTED}.")
        return _decode_stream(io.BytesIO(bytes(source)), "The data", max_pixels)
    if isinstance(source, (str, os.PathLike)):
        return _from_path(Path(source), max_pixels)
    if hasattr(source, "read"):
        name = Path(str(getattr(source, "name", "") or "The image")).name or "The image"
        data = source.read()
        if not data:
            raise ImageLoadError(f"{name} is empty (0 bytes). {ACCEPTED}.")
        return _decode_stream(io.BytesIO(data), name, max_pixels)
    raise TypeError(
        "load_image expects a path, bytes, a binary file, a PIL image or a uint8 numpy array, "
        f"not {type(source).__name__}"
    )
