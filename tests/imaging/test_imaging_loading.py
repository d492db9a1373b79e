"""Image loading: every source kind, every PIL mode, EXIF rotation and refused inputs."""

from __future__ import annotations

import hashlib
import io
import os
import struct
import threading
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
    with pytest.raises(ImageLoadError, match=r"noise\.png is not an image vitviz reads"):
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


# ----------------------------------------------------------------------------- only our formats

# An EPS file: Pillow identifies it by its first bytes and hands it to Ghostscript to decode.
EPS = (
    b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 16 16\n%%EndComments\n"
    b"/Helvetica findfont 12 scalefont setfont 0 0 moveto (hello) show\nshowpage\n%%EOF\n"
)


@pytest.fixture
def fake_gs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A ``gs`` first on PATH that leaves a marker file whenever it runs; returns the marker.

    Pillow finds Ghostscript by running ``gs --version`` the first time it needs it and keeps
    the answer in ``EpsImagePlugin.gs_binary``; resetting that makes it look again, here.
    """
    from PIL import EpsImagePlugin

    folder = tmp_path / "bin"
    folder.mkdir()
    marker = tmp_path / "gs-ran"
    gs = folder / "gs"
    gs.write_text(f"#!/bin/sh\necho \"$@\" >> '{marker}'\nexit 0\n")
    gs.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setattr(EpsImagePlugin, "gs_binary", None)
    monkeypatch.setattr(EpsImagePlugin, "gs_windows_binary", None)
    return marker


def test_postscript_named_png_never_starts_ghostscript(
    tmp_path: Path, fake_gs: Path, tiny_ckpt: Path, capsys: pytest.CaptureFixture
) -> None:
    from vitviz import cli
    from vitviz.checkpoints import load_checkpoint
    from vitviz.pipeline.analysis import analyze
    from vitviz.training.config import TrainConfig
    from vitviz.training.datasets import load_dataset
    from vitviz.workers import jobs

    eps = tmp_path / "photo.png"
    eps.write_bytes(EPS)
    refusal = r"holds EPS \(PostScript\) data, which vitviz does not open\. Accepted: PNG, JPEG"

    # The Python API, from every kind of source.
    with pytest.raises(ImageLoadError, match=r"^photo\.png " + refusal):
        load_image(eps)
    with pytest.raises(ImageLoadError, match=r"^The data " + refusal):
        load_image(EPS)
    with eps.open("rb") as stream, pytest.raises(ImageLoadError, match=refusal):
        load_image(stream)
    with Image.open(eps) as lazy, pytest.raises(ImageLoadError, match=refusal):
        load_image(lazy)  # opened by the caller with every format; decoding it would run gs
    with pytest.raises(ImageLoadError, match=refusal):
        analyze(load_checkpoint(tiny_ckpt), eps)

    # The window's engine job.
    state = jobs.EngineState()
    jobs.load_model(state, tiny_ckpt)
    with pytest.raises(jobs.UserFacingError, match=refusal) as info:
        jobs.analyze_image(state, eps, eps.name)
    assert info.value.kind == "image"

    # The CLI: one clear line, exit 2, nothing written.
    out = tmp_path / "out"
    status = cli.main(["explain", str(eps), "--checkpoint", str(tiny_ckpt), "--out", str(out)])
    err = capsys.readouterr().err
    assert status == 2
    assert "photo.png holds EPS (PostScript) data" in err and "Traceback" not in err
    assert not list(out.iterdir())

    # Training on an image folder: the file is skipped with the same message.
    root = tmp_path / "data"
    for name, value in (("a", 40), ("b", 200)):
        (root / name).mkdir(parents=True)
        for i in range(2):
            Image.new("RGB", (20, 20), (value, value, value)).save(root / name / f"{i}.png")
    (root / "a" / "2.png").write_bytes(EPS)
    data = load_dataset(TrainConfig(dataset=f"folder:{root}", image_size=16))
    assert len(data.train_labels) + len(data.val_labels) == 4
    assert any("2.png holds EPS (PostScript) data" in note for note in data.notes)

    assert not fake_gs.exists(), "Ghostscript was started"
    # The set-up is real: Pillow left to itself does start (the fake) Ghostscript on this file.
    with pytest.raises(OSError), Image.open(eps) as raw:
        raw.load()
    assert fake_gs.exists()


def _image_bytes(fmt: str, **kwargs) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(data.chelsea()[:40, :60]).save(buffer, format=fmt, **kwargs)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"%PDF-1.7\n1 0 obj\n<<>>\nendobj\n", r"holds PDF data, which vitviz does not open"),
        (
            b'<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg"/>\n',
            r"holds SVG data, which vitviz does not open",
        ),
        (b"hello, world\n" * 10, r"is not an image vitviz reads\. Accepted: PNG, JPEG"),
        (_image_bytes("TGA"), r"is not an image vitviz reads"),  # Pillow would open it
        (_image_bytes("PCX"), r"is not an image vitviz reads"),  # likewise
        (_image_bytes("JPEG2000"), r"holds JPEG 2000 data, which vitviz does not open"),
        (
            _image_bytes("PNG")[:8] + b"\x00\x00\x00\x0dJUNK" + bytes(40),
            r"starts like a PNG file but its header could not be read",
        ),
    ],
    ids=["pdf", "svg", "text", "tga", "pcx", "jpeg2000", "cut-png-header"],
)
def test_other_formats_are_refused_by_name(tmp_path: Path, content: bytes, expected: str) -> None:
    path = tmp_path / "x.png"
    path.write_bytes(content)
    with pytest.raises(ImageLoadError, match=r"^x\.png " + expected):
        load_image(path)


def test_accepted_formats_come_from_one_list(tmp_path: Path, cat: np.ndarray) -> None:
    from vitviz.imaging.loading import ACCEPTED, FORMATS

    assert ACCEPTED == "Accepted: PNG, JPEG, BMP, GIF, TIFF, WebP, PPM/PGM/PBM and ICO images"
    formats = {Image.registered_extensions()[ext] for ext in IMAGE_EXTENSIONS}
    assert formats == set(FORMATS)
    for ext in (".eps", ".ps", ".pdf", ".tga", ".pcx", ".psd", ".jp2", ".svg", ".xpm", ".mpeg"):
        assert not is_image_path(f"x{ext}")
    small = cat[:32, :32]
    for fmt, suffix in (("BMP", ".bmp"), ("PPM", ".ppm"), ("WEBP", ".webp"), ("ICO", ".ico")):
        path = _save(tmp_path, f"cat{suffix}", Image.fromarray(small), format=fmt)
        assert load_image(path).size == (32, 32)


def test_file_kind_sniffs_only_accepted_formats(tmp_path: Path) -> None:
    from vitviz.core.filekinds import file_kind

    (tmp_path / "picture").write_bytes(_image_bytes("PNG"))
    (tmp_path / "webp").write_bytes(_image_bytes("WEBP"))
    (tmp_path / "drawing").write_bytes(EPS)
    (tmp_path / "scan").write_bytes(_image_bytes("JPEG2000"))
    kinds = {p.name: file_kind(p) for p in tmp_path.iterdir()}
    assert kinds == {"picture": "image", "webp": "image", "drawing": "unknown", "scan": "unknown"}


def _load_in_thread(path: Path) -> BaseException | None:
    """Load ``path`` in a thread; fail (unblocking it) if that takes more than 10 s."""
    result: list[BaseException | None] = []

    def run() -> None:
        try:
            load_image(path)
            result.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            result.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(10)
    if worker.is_alive():
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))  # let the blocked open return
        pytest.fail(f"loading {path.name} hung")
    return result[0]


def test_fifo_and_folder_named_png_are_refused_without_blocking(tmp_path: Path) -> None:
    from vitviz.core.filekinds import file_kind

    fifo = tmp_path / "pipe.png"
    os.mkfifo(fifo)
    error = _load_in_thread(fifo)
    assert isinstance(error, ImageLoadError)
    assert str(error) == "pipe.png is a FIFO, not an image file."
    odd = tmp_path / "pipe.dat"
    os.mkfifo(odd)
    assert file_kind(odd) == "unknown"  # decided without opening it
    folder = tmp_path / "album.png"
    folder.mkdir()
    with pytest.raises(ImageLoadError, match="is a folder, not an image file"):
        load_image(folder)


def test_non_utf8_names(tmp_path: Path, cat: np.ndarray, tiny_ckpt: Path, capsys) -> None:
    from vitviz import cli

    good = Path(os.fsdecode(bytes(tmp_path) + b"/caf\xe9.png"))
    Image.fromarray(cat).save(good, format="PNG")
    np.testing.assert_array_equal(np.asarray(load_image(good)), cat)
    bad = Path(os.fsdecode(bytes(tmp_path) + b"/caf\xe9-eps.png"))
    bad.write_bytes(EPS)
    with pytest.raises(ImageLoadError) as info:
        load_image(bad)
    message = str(info.value)
    assert message.startswith("caf\\xe9-eps.png holds EPS (PostScript) data")
    message.encode("utf-8")  # printable anywhere: no lone surrogates
    out = tmp_path / "out"
    status = cli.main(
        ["explain", str(good), str(bad), "--checkpoint", str(tiny_ckpt), "--out", str(out)]
    )
    err = capsys.readouterr().err
    assert status == 1
    assert "caf\\xe9-eps.png holds EPS" in err and "Traceback" not in err


# ----------------------------------------------------------------------------- reduced decoding


@pytest.fixture(scope="module")
def photo_1200(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A 1200 × 900 photograph as JPEG (quality 95) and as PNG."""
    folder = tmp_path_factory.mktemp("big")
    image = Image.fromarray(data.astronaut()).resize((1200, 900), Image.Resampling.BICUBIC)
    jpeg, png = folder / "astronaut.jpg", folder / "astronaut.png"
    image.save(jpeg, quality=95)
    image.save(png)
    return jpeg, png


def test_max_side_keeps_the_aspect_and_matches_a_full_resize(photo_1200) -> None:
    jpeg, png = photo_1200
    for path in (jpeg, png):
        full = load_image(path)
        reduced = load_image(path, max_side=300)
        assert reduced.mode == "RGB" and reduced.size == (300, 225)
        expected = np.asarray(full.resize((300, 225), Image.Resampling.LANCZOS), dtype=float)
        diff = np.abs(np.asarray(reduced, dtype=float) - expected)
        assert diff.mean() < 1.5, path.suffix  # JPEG: decoded at 1/2 or 1/4 scale first
    assert load_image(png, max_side=5000).size == (1200, 900)  # never enlarged
    with pytest.raises(ValueError, match="max_side"):
        load_image(png, max_side=0)


def test_min_size_wins_over_max_side(photo_1200) -> None:
    _, png = photo_1200
    assert load_image(png, max_side=300, min_size=(450, 0)).size == (600, 450)
    assert load_image(png, max_side=1, min_size=(0, 400)).size == (400, 300)
    seen: list[tuple[int, int]] = []

    def rule(size: tuple[int, int]) -> tuple[int, int]:
        seen.append(size)
        return 90, 90

    assert load_image(png, max_side=1, min_size=rule).size == (120, 90)
    assert seen == [(900, 1200)]  # (H, W)


def test_reduction_follows_the_exif_orientation(tmp_path: Path, photo_1200) -> None:
    _, png = photo_1200
    exif = Image.Exif()
    exif[0x0112] = 6  # stored landscape, shown portrait
    path = tmp_path / "turned.jpg"
    with Image.open(png) as image:
        image.save(path, quality=95, exif=exif)
    full = load_image(path)
    assert full.size == (900, 1200)
    assert load_image(path, max_side=400).size == (300, 400)
    upright: list[tuple[int, int]] = []
    small = load_image(path, max_side=1, min_size=lambda hw: upright.append(hw) or (200, 0))
    assert upright == [(1200, 900)] and small.size == (150, 200)
    expected = np.asarray(full.resize((150, 200), Image.Resampling.LANCZOS), dtype=float)
    assert np.abs(np.asarray(small, dtype=float) - expected).mean() < 2


def test_reduced_model_input_matches_the_full_one(photo_1200) -> None:
    from vitviz.imaging import Preprocessing, prepare_image
    from vitviz.imaging.loading import full_size
    from vitviz.imaging.reduction import REDUCING_GAP, model_min_size

    jpeg, _ = photo_1200
    for prep, patch in (
        (Preprocessing(64, "squash"), 8),
        (Preprocessing(32, "crop", crop_pct=0.875), 8),
        (Preprocessing((48, 64), "fit"), 16),
    ):
        rule = model_min_size(prep, patch)
        reduced = load_image(jpeg, max_side=1, min_size=rule)
        assert min(reduced.size) < 900  # the rule lets it be reduced
        h, w = rule((900, 1200))
        assert reduced.height >= h and reduced.width >= w
        assert min(h, w) >= REDUCING_GAP * 32
        assert full_size(reduced) == (900, 1200)
        full = prepare_image(load_image(jpeg), prep, patch)
        small = prepare_image(reduced, prep, patch, full_size=full_size(reduced))
        assert small.pixels.shape == full.pixels.shape
        fx, fy = reduced.width / 1200, reduced.height / 900
        scaled = np.array(full.geometry.region) * [fx, fy, fx, fy]
        np.testing.assert_allclose(small.geometry.region, scaled, atol=1e-6)
        diff = np.abs(small.pixels.astype(float) - full.pixels.astype(float))
        assert diff.mean() < 1.0 and diff.max() <= 12, (prep, diff.mean(), diff.max())
        assert small.geometry.grid == full.geometry.grid


def test_pillow_log_lines_never_reach_stderr(tmp_path: Path) -> None:
    """A TIFF claiming 4099 samples per pixel: Pillow logs an error about it, which Python
    prints on stderr (no logging configured, as in vitviz-cli) beside vitviz's own refusal."""
    import subprocess
    import sys

    buffer = io.BytesIO()
    Image.new("RGB", (4, 4)).save(buffer, "TIFF")
    tiff = bytearray(buffer.getvalue())
    (ifd,) = struct.unpack("<I", tiff[4:8])
    (count,) = struct.unpack("<H", tiff[ifd : ifd + 2])
    for i in range(count):
        entry = ifd + 2 + 12 * i
        if struct.unpack("<H", tiff[entry : entry + 2])[0] == 277:  # SamplesPerPixel
            tiff[entry + 8 : entry + 10] = struct.pack("<H", 4099)
    path = tmp_path / "samples.tif"
    path.write_bytes(bytes(tiff))
    code = (
        "import sys\n"
        "from vitviz.imaging import ImageLoadError, load_image\n"
        "try:\n    load_image(sys.argv[1])\n"
        "except ImageLoadError as exc:\n    print(exc)\n"
    )
    repo = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": repo}
    proc = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert "samples.tif" in proc.stdout
    assert proc.stderr == ""


def test_list_images_passes_over_the_masks_beside_images(tmp_path) -> None:
    from PIL import Image

    from vitviz.imaging.loading import list_images

    for name in ("cat.jpg", "cat_mask.png", "dog.png", "dog_mask.png", "lone_mask.png"):
        Image.new("RGB", (4, 4)).save(tmp_path / name)
    # a mask is passed over only beside its image: "lone_mask.png" has none, so it is an image
    assert [p.name for p in list_images(tmp_path)] == ["cat.jpg", "dog.png", "lone_mask.png"]
