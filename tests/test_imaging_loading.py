"""Image loading: every source kind, every PIL mode, EXIF rotation and refused inputs."""

from __future__ import annotations

import hashlib
import io
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from skimage import data

from vitviz.imaging import (
    DEFAULT_MAX_PIXELS,
    IMAGE_EXTENSIONS,
    ImageLoadError,
    is_image_path,
    list_images,
    load_image,
)


@pytest.fixture(scope="module")
def cat() -> np.ndarray:
    """(300, 451, 3) uint8 photograph."""
    return data.chelsea()


def _save(tmp_path: Path, name: str, image: Image.Image, **kwargs) -> Path:
    path = tmp_path / name
    image.save(path, **kwargs)
    return path


def _load(path: Path) -> np.ndarray:
    out = load_image(path)
    assert isinstance(out, Image.Image)
    assert out.mode == "RGB"
    return np.asarray(out)


def _png_chunk(kind: bytes, payload: bytes) -> bytes:
    return (
        struct.pack(">I", len(payload))
        + kind
        + payload
        + struct.pack(">I", zlib.crc32(kind + payload))
    )


def _png_header_only(width: int, height: int) -> bytes:
    """A PNG whose IHDR claims width × height 1-bit grey pixels but holds no pixel data."""
    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", ihdr) + _png_chunk(b"IEND", b"")


# ----------------------------------------------------------------------------- sources


def test_png_round_trip_is_exact_and_file_untouched(tmp_path: Path, cat: np.ndarray) -> None:
    path = _save(tmp_path, "cat.png", Image.fromarray(cat))
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    np.testing.assert_array_equal(_load(path), cat)
    np.testing.assert_array_equal(np.asarray(load_image(str(path))), cat)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


def test_bytes_file_object_pil_and_arrays(tmp_path: Path, cat: np.ndarray) -> None:
    buffer = io.BytesIO()
    Image.fromarray(cat).save(buffer, format="PNG")
    raw = buffer.getvalue()
    np.testing.assert_array_equal(np.asarray(load_image(raw)), cat)
    np.testing.assert_array_equal(np.asarray(load_image(io.BytesIO(raw))), cat)
    pil = Image.fromarray(cat)
    loaded = load_image(pil)
    assert loaded is not pil
    np.testing.assert_array_equal(np.asarray(loaded), cat)
    np.testing.assert_array_equal(np.asarray(load_image(cat)), cat)
    gray = cat[:, :, 1]
    np.testing.assert_array_equal(np.asarray(load_image(gray)), np.dstack([gray] * 3))
    rgba = np.dstack([cat, np.full(cat.shape[:2], 7, np.uint8)])
    np.testing.assert_array_equal(np.asarray(load_image(rgba)), cat)
    with pytest.raises(ImageLoadError, match="uint8"):
        load_image(cat.astype(np.float32))
    with pytest.raises(ImageLoadError, match="shape"):
        load_image(np.zeros((4, 4, 2), np.uint8))


# ----------------------------------------------------------------------------- modes


@pytest.mark.parametrize("mode", ["L", "1", "LA", "YCbCr"])
def test_simple_modes_match_pil_conversion(tmp_path: Path, cat: np.ndarray, mode: str) -> None:
    source = Image.fromarray(cat).convert(mode)
    if mode == "YCbCr":
        path = _save(tmp_path, "cat.jpg", source, quality=95)
        with Image.open(path) as raw:
            assert raw.mode in ("RGB", "YCbCr")
        loaded = _load(path)
        assert np.abs(loaded.astype(int) - cat).mean() < 4
        return
    path = _save(tmp_path, f"cat_{mode}.png", source)
    with Image.open(path) as raw:
        assert raw.mode == mode
    loaded = _load(path)
    gray = np.asarray(source.convert("L"))
    for channel in range(3):
        np.testing.assert_array_equal(loaded[:, :, channel], gray)
    if mode == "1":
        assert set(np.unique(loaded)) <= {0, 255}


def test_palette(tmp_path: Path, cat: np.ndarray) -> None:
    source = Image.fromarray(cat).convert("P", palette=Image.Palette.ADAPTIVE, colors=64)
    path = _save(tmp_path, "cat_p.png", source)
    with Image.open(path) as raw:
        assert raw.mode == "P"
    loaded = _load(path)
    np.testing.assert_array_equal(loaded, np.asarray(source.convert("RGB")))
    assert np.abs(loaded.astype(int) - cat).mean() < 12


@pytest.mark.parametrize("bytes_transparency", [False, True])
def test_palette_with_transparency(tmp_path: Path, bytes_transparency: bool) -> None:
    palette = [0, 0, 0, 200, 10, 30, 20, 220, 40] + [0] * (256 * 3 - 9)
    indices = np.array([[0, 1, 2, 1], [2, 1, 0, 0]], np.uint8)
    source = Image.fromarray(indices, mode="L").convert("P")
    source.putpalette(palette)
    if bytes_transparency:
        source.info["transparency"] = bytes([0, 128] + [255] * 254)
    else:
        source.info["transparency"] = 1
    path = _save(tmp_path, "pal.png", source)
    with Image.open(path) as raw:
        assert raw.mode == "P" and "transparency" in raw.info
    loaded = _load(path)  # filterwarnings=error: a palette warning would fail here
    colours = np.array(palette[:9], np.uint8).reshape(3, 3)
    np.testing.assert_array_equal(loaded, colours[indices])


def test_rgba_drops_alpha(tmp_path: Path, cat: np.ndarray) -> None:
    alpha = np.tile(np.linspace(0, 255, cat.shape[1]).astype(np.uint8), (cat.shape[0], 1))
    path = _save(tmp_path, "cat_rgba.png", Image.fromarray(np.dstack([cat, alpha])))
    np.testing.assert_array_equal(_load(path), cat)


def test_cmyk_jpeg(tmp_path: Path, cat: np.ndarray) -> None:
    path = _save(tmp_path, "cat_cmyk.jpg", Image.fromarray(cat).convert("CMYK"), quality=95)
    with Image.open(path) as raw:
        assert raw.mode == "CMYK"
    loaded = _load(path)
    assert loaded.shape == cat.shape
    assert np.abs(loaded.astype(int) - cat).mean() < 6


def test_16bit_png_scales_by_type_range(tmp_path: Path, cat: np.ndarray) -> None:
    gray16 = cat[:, :, 0].astype(np.uint16) * 257
    gray16[0, :4] = [65535, 32896, 257, 0]
    path = _save(tmp_path, "gray16.png", Image.fromarray(gray16))
    with Image.open(path) as raw:
        assert raw.mode.startswith("I")
    loaded = _load(path)
    assert loaded[0, :4, 0].tolist() == [255, 128, 1, 0]
    np.testing.assert_array_equal(loaded[1:, :, 0], cat[1:, :, 0])
    np.testing.assert_array_equal(loaded[:, :, 2], loaded[:, :, 0])


def test_16bit_big_endian_and_32bit(tmp_path: Path) -> None:
    values = np.array([[0, 257, 32896, 65535]], np.uint16)
    big = Image.frombytes("I;16B", (4, 1), values.astype(">u2").tobytes())
    assert np.asarray(load_image(big))[0, :, 0].tolist() == [0, 1, 128, 255]
    wide = Image.fromarray(values.astype(np.int32))
    assert wide.mode == "I"
    path = _save(tmp_path, "wide.tif", wide)
    assert _load(path)[0, :, 0].tolist() == [0, 1, 128, 255]


def test_float_images(tmp_path: Path) -> None:
    unit = np.array([[0.0, 0.5, 1.0, np.nan]], np.float32)
    path = _save(tmp_path, "unit.tif", Image.fromarray(unit))
    with Image.open(path) as raw:
        assert raw.mode == "F"
    assert _load(path)[0, :, 1].tolist() == [0, 128, 255, 0]
    wide = Image.fromarray(np.array([[-10.0, 0.0, 30.0]], np.float32))
    assert np.asarray(load_image(wide))[0, :, 0].tolist() == [0, 64, 255]


# ----------------------------------------------------------------------------- EXIF


@pytest.mark.parametrize(("orientation", "turns"), [(6, -1), (8, 1), (3, 2)])
def test_exif_orientation(tmp_path: Path, cat: np.ndarray, orientation: int, turns: int) -> None:
    exif = Image.Exif()
    exif[0x0112] = orientation
    path = _save(tmp_path, f"rot{orientation}.jpg", Image.fromarray(cat), quality=95, exif=exif)
    with Image.open(path) as raw:
        stored = np.asarray(raw.convert("RGB"))
    loaded = _load(path)
    np.testing.assert_array_equal(loaded, np.rot90(stored, k=turns))
    if orientation in (6, 8):
        assert loaded.shape[:2] == (cat.shape[1], cat.shape[0])


# ----------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(("suffix", "fmt"), [(".jpg", "JPEG"), (".png", "PNG")])
def test_truncated_files(tmp_path: Path, cat: np.ndarray, suffix: str, fmt: str) -> None:
    buffer = io.BytesIO()
    Image.fromarray(cat).save(buffer, format=fmt)
    path = tmp_path / f"cut{suffix}"
    path.write_bytes(buffer.getvalue()[: len(buffer.getvalue()) // 2])
    with pytest.raises(ImageLoadError, match="truncated or corrupt") as info:
        load_image(path)
    assert f"cut{suffix}" in str(info.value)
    assert "Accepted:" in str(info.value)


def test_not_an_image(tmp_path: Path) -> None:
    path = tmp_path / "noise.png"
    path.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    with pytest.raises(ImageLoadError, match=r"noise\.png is not an image PIL can read"):
        load_image(path)
    text = tmp_path / "photo.txt"
    text.write_text("hello")
    with pytest.raises(ImageLoadError, match="Accepted: PNG, JPEG"):
        load_image(text)


def test_empty_missing_and_directory(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jpg"
    empty.write_bytes(b"")
    with pytest.raises(ImageLoadError, match="empty"):
        load_image(empty)
    with pytest.raises(ImageLoadError, match="empty"):
        load_image(b"")
    with pytest.raises(ImageLoadError, match="does not exist"):
        load_image(tmp_path / "missing.png")
    with pytest.raises(ImageLoadError, match="folder"):
        load_image(tmp_path)
    with pytest.raises(TypeError):
        load_image(3.5)  # type: ignore[arg-type]


def test_small_pixel_limit(tmp_path: Path, cat: np.ndarray) -> None:
    path = _save(tmp_path, "cat.png", Image.fromarray(cat))
    with pytest.raises(ImageLoadError, match=r"451×300 pixels.*1,000 pixels"):
        load_image(path, max_pixels=1000)
    with pytest.raises(ImageLoadError, match="451×300"):
        load_image(Image.fromarray(cat), max_pixels=1000)
    with pytest.raises(ImageLoadError, match="limit"):
        load_image(cat, max_pixels=1000)
    assert load_image(path, max_pixels=451 * 300).size == (451, 300)


def test_header_bomb_refused_without_decoding(tmp_path: Path) -> None:
    path = tmp_path / "bomb.png"
    path.write_bytes(_png_header_only(30000, 30000))
    with pytest.raises(ImageLoadError, match="30000×30000") as info:
        load_image(path)
    assert f"{DEFAULT_MAX_PIXELS:,}" in str(info.value)


def test_size_between_pil_warning_and_limit(tmp_path: Path) -> None:
    # 100 MP: above PIL's warning threshold, below the default limit. No warning may leak
    # (pytest turns it into an error); the missing pixel data is reported as corrupt.
    path = tmp_path / "big.png"
    path.write_bytes(_png_header_only(10000, 10000))
    with pytest.raises(ImageLoadError, match="truncated or corrupt"):
        load_image(path)
    with pytest.raises(ImageLoadError, match=r"10000×10000.*50,000,000"):
        load_image(path, max_pixels=50_000_000)


# ----------------------------------------------------------------------------- folders


def test_extensions_and_is_image_path() -> None:
    for ext in (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm"):
        assert ext in IMAGE_EXTENSIONS
    assert all(ext == ext.lower() and ext.startswith(".") for ext in IMAGE_EXTENSIONS)
    assert is_image_path("a/B.JPG")
    assert is_image_path(Path("x.Tiff"))
    assert not is_image_path("notes.txt")
    assert not is_image_path("model.safetensors")
    assert not is_image_path("png")


def test_list_images_natural_order(tmp_path: Path) -> None:
    tiny = Image.new("RGB", (2, 2))
    for name in ("img10.png", "img2.png", "IMG1.jpg", "img2b.bmp", ".hidden.png"):
        tiny.save(tmp_path / name)
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "folder.png").mkdir()
    found = [p.name for p in list_images(tmp_path)]
    assert found == ["IMG1.jpg", "img2.png", "img2b.bmp", "img10.png"]
    with pytest.raises(ImageLoadError, match="not a folder"):
        list_images(tmp_path / "img2.png")


def test_lazy_pil_image_that_fails_to_decode(cat: np.ndarray) -> None:
    buffer = io.BytesIO()
    Image.fromarray(cat).save(buffer, format="JPEG")
    raw = buffer.getvalue()
    with (
        Image.open(io.BytesIO(raw[: len(raw) // 3])) as lazy,
        pytest.raises(ImageLoadError, match="could not be decoded"),
    ):
        load_image(lazy)
