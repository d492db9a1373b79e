"""Overlays: upsampling, colormaps, map over the source image, head grids, atomic PNG export."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from skimage import data

from vitviz.imaging import (
    COLORMAPS,
    PatchGeometry,
    Preprocessing,
    apply_colormap,
    head_grid_image,
    lookup_table,
    overlay_on_image,
    prepare_image,
    save_png,
    upsample_map,
)
from vitviz.imaging import overlay as overlay_module

# ----------------------------------------------------------------------------- upsampling


@pytest.mark.parametrize("size", [(10, 17), (32, 48), (7, 5)])
def test_nearest_blocks_line_up_with_patch_boxes(size: tuple[int, int]) -> None:
    gh, gw = 2, 3
    map_ = np.arange(gh * gw, dtype=np.float32).reshape(gh, gw) + 1
    out = upsample_map(map_, size)
    assert out.shape == size and out.dtype == np.float32
    h, w = size
    expected = np.zeros(size, np.float32)
    for r in range(gh):
        for c in range(gw):
            # Pixels whose centres fall in the patch box [r·h/gh, (r+1)·h/gh) × [...].
            ys = [y for y in range(h) if r * h / gh <= y + 0.5 < (r + 1) * h / gh]
            xs = [x for x in range(w) if c * w / gw <= x + 0.5 < (c + 1) * w / gw]
            expected[np.ix_(ys, xs)] = map_[r, c]
    np.testing.assert_array_equal(out, expected)


def test_nearest_exact_multiple_is_kron() -> None:
    map_ = np.random.default_rng(0).random((3, 4)).astype(np.float32)
    np.testing.assert_array_equal(upsample_map(map_, (48, 64)), np.kron(map_, np.ones((16, 16))))


def test_smooth_upsampling() -> None:
    map_ = np.array([[0.0, 1.0], [2.0, 3.0]], np.float32)
    out = upsample_map(map_, (6, 6), smooth=True)
    assert out.min() >= 0.0 and out.max() <= 3.0
    # Pixel 1 is the centre of patch 0 (3 pixels per patch): it holds the patch value.
    assert out[1, 1] == pytest.approx(0.0)
    assert out[4, 4] == pytest.approx(3.0)
    assert out[1, 4] == pytest.approx(1.0)
    # Between centres the value is interpolated, monotone along each row.
    assert 0.0 < out[1, 2] < out[1, 3] < 1.0
    np.testing.assert_allclose(upsample_map(np.full((3, 5), 0.25), (13, 17), smooth=True), 0.25)


# ----------------------------------------------------------------------------- colormaps


def test_colormap_tables() -> None:
    assert set(COLORMAPS) >= {"viridis", "inferno", "magma", "jet", "grey"}
    for name in COLORMAPS:
        table = lookup_table(name)
        assert table.shape == (256, 3) and table.dtype == np.uint8
        assert lookup_table(name, 16).shape == (16, 3)
    r, g, b = (int(v) for v in lookup_table("viridis")[0])
    assert b > g and r > g and r + g + b < 200  # dark purple-blue
    r, g, b = (int(v) for v in lookup_table("viridis")[-1])
    assert r > 200 and g > 200 and b < 80  # yellow
    np.testing.assert_array_equal(lookup_table("grey")[:, 0], np.arange(256))
    jet = lookup_table("jet")
    assert jet[0, 2] > 100 and jet[0, 0] == 0  # dark blue
    assert jet[-1, 0] > 100 and jet[-1, 2] == 0  # dark red
    magma, inferno = lookup_table("magma"), lookup_table("inferno")
    assert magma[0].sum() < 20 and inferno[0].sum() < 20
    # Perceptual maps get brighter along the way.
    for name in ("viridis", "magma", "inferno"):
        brightness = lookup_table(name).astype(int).sum(axis=1)
        assert brightness[-1] > brightness[128] > brightness[0]


def test_unknown_colormap_lists_known_ones() -> None:
    with pytest.raises(ValueError, match=r"viridis.*grey"):
        lookup_table("rainbow")
    with pytest.raises(ValueError, match="known"):
        apply_colormap(np.zeros(3), "rainbow")


def test_apply_colormap() -> None:
    values = np.array([[0.0, 1.0], [-3.0, np.nan]])
    rgb = apply_colormap(values, "viridis")
    table = lookup_table("viridis")
    assert rgb.shape == (2, 2, 3) and rgb.dtype == np.uint8
    np.testing.assert_array_equal(rgb[0, 0], table[0])
    np.testing.assert_array_equal(rgb[0, 1], table[255])
    np.testing.assert_array_equal(rgb[1, 0], table[0])  # clipped
    rgba = apply_colormap(values, "viridis", alpha=True)
    assert rgba.shape == (2, 2, 4)
    assert rgba[1, 1, 3] == 0 and rgba[0, 0, 3] == 255


# ----------------------------------------------------------------------------- overlays


@pytest.fixture(scope="module")
def cat_case() -> tuple[np.ndarray, PatchGeometry]:
    """Cat photo (300 × 451) and the geometry of its 224 × 224 centre crop, patch 16."""
    cat = data.chelsea()
    prep = Preprocessing((224, 224), "crop", 0.875)
    return cat, prepare_image(Image.fromarray(cat), prep, 16).geometry


def test_one_hot_patch_colours_exactly_its_box(cat_case: tuple) -> None:
    cat, geo = cat_case
    row, col = 3, 5
    map_ = np.zeros(geo.grid, np.float32)
    map_[row, col] = 1.0
    out = np.asarray(overlay_on_image(cat, map_, geometry=geo, opacity=1.0))
    assert out.shape == cat.shape  # true aspect ratio, full resolution
    table = lookup_table("viridis")
    hot, cold = table[255], table[0]

    ys, xs = np.mgrid[0 : cat.shape[0], 0 : cat.shape[1]] + 0.5
    x0, y0, x1, y1 = geo.patch_box_source(row, col)
    in_box = (xs >= x0) & (xs < x1) & (ys >= y0) & (ys < y1)
    left, top, right, bottom = geo.region
    in_region = (xs >= left) & (xs < right) & (ys >= top) & (ys < bottom)
    assert in_box.sum() > 100
    assert np.all(out[in_box] == hot)
    assert np.all(out[in_region & ~in_box] == cold)
    dimmed = np.rint(cat * overlay_module.DIM).astype(np.uint8)
    np.testing.assert_array_equal(out[~in_region], dimmed[~in_region])


def test_opacity_blends(cat_case: tuple) -> None:
    cat, geo = cat_case
    map_ = np.zeros(geo.grid, np.float32)
    map_[0, 0] = 1.0
    half = np.asarray(overlay_on_image(Image.fromarray(cat), map_, geometry=geo, opacity=0.5))
    x0, y0 = geo.patch_box_source(0, 0)[:2]
    y, x = int(y0) + 3, int(x0) + 3
    expected = np.rint(0.5 * cat[y, x].astype(float) + 0.5 * lookup_table("viridis")[255])
    np.testing.assert_allclose(half[y, x], expected, atol=1)


def test_levels_clip(cat_case: tuple) -> None:
    cat, geo = cat_case
    map_ = np.zeros(geo.grid, np.float32)
    map_[1, 1] = 10.0
    map_[2, 2] = 0.5
    out = np.asarray(overlay_on_image(cat, map_, geometry=geo, opacity=1.0, levels=(0.0, 0.5)))
    hot = lookup_table("viridis")[255]
    for r, c in ((1, 1), (2, 2)):
        x0, y0 = geo.patch_box_source(r, c)[:2]
        np.testing.assert_array_equal(out[int(y0) + 2, int(x0) + 2], hot)


def test_overlay_without_geometry_covers_everything() -> None:
    base = np.full((30, 45, 3), 100, np.uint8)
    map_ = np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    out = np.asarray(overlay_on_image(base, map_, colormap="grey", opacity=1.0))
    assert out.shape == base.shape
    assert np.all(out[:15, 15:30] == 255)
    assert np.all(out[:, :15] == 0) and np.all(out[15:] == 0)


def test_overlay_rejects_mismatches(cat_case: tuple) -> None:
    cat, geo = cat_case
    with pytest.raises(ValueError, match="original image"):
        overlay_on_image(cat[:200], np.zeros(geo.grid), geometry=geo)
    with pytest.raises(ValueError, match="patch grid"):
        overlay_on_image(cat, np.zeros((3, 3)), geometry=geo)


def test_overlay_smooth_on_source_stays_in_region(cat_case: tuple) -> None:
    cat, geo = cat_case
    map_ = np.random.default_rng(2).random(geo.grid).astype(np.float32)
    out = np.asarray(overlay_on_image(cat, map_, geometry=geo, smooth=True))
    left = int(np.floor(geo.region[0]))
    dimmed = np.rint(cat[:, : left - 1] * overlay_module.DIM).astype(np.uint8)
    np.testing.assert_array_equal(out[:, : left - 1], dimmed)


def _reference_overlay(image: np.ndarray, map_: np.ndarray, geo: PatchGeometry) -> np.ndarray:
    """The nearest-patch overlay (opacity 0.6) in one piece, from its definition (float64)."""
    h, w = image.shape[:2]
    norm = (map_ - map_.min()) / (map_.max() - map_.min())
    ys, xs = np.mgrid[0:h, 0:w] + 0.5
    gy = (ys - geo.region[1]) / geo.scale[1] / geo.patch_size
    gx = (xs - geo.region[0]) / geo.scale[0] / geo.patch_size
    gh, gw = geo.grid
    inside = (gy >= 0) & (gy < gh) & (gx >= 0) & (gx < gw)
    r = np.clip(np.floor(gy).astype(int), 0, gh - 1)
    c = np.clip(np.floor(gx).astype(int), 0, gw - 1)
    values = norm[r, c]
    colours = lookup_table("viridis")[np.rint(np.clip(values, 0, 1) * 255).astype(int)]
    base = np.where(inside[..., None], image, np.rint(image * overlay_module.DIM))
    out = np.where(inside[..., None], base * 0.4 + colours * 0.6, base)
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


@pytest.mark.parametrize("band_pixels", [451, 451 * 7, 1 << 20])
def test_overlay_in_bands_is_the_same_picture(
    cat_case: tuple, monkeypatch: pytest.MonkeyPatch, band_pixels: int
) -> None:
    cat, geo = cat_case
    map_ = np.random.default_rng(5).random(geo.grid).astype(np.float32)
    whole = np.asarray(overlay_on_image(cat, map_, geometry=geo))
    smooth_whole = np.asarray(overlay_on_image(Image.fromarray(cat), map_, smooth=True))
    monkeypatch.setattr(overlay_module, "_BAND_PIXELS", band_pixels)  # 1 row, 7 rows, all
    np.testing.assert_array_equal(np.asarray(overlay_on_image(cat, map_, geometry=geo)), whole)
    banded = overlay_on_image(Image.fromarray(cat), map_, smooth=True)
    np.testing.assert_array_equal(np.asarray(banded), smooth_whole)
    reference = _reference_overlay(cat, map_, geo)
    assert np.abs(whole.astype(int) - reference).max() <= 1


def test_fit_for_overlay_keeps_the_patch_grid_on_the_picture(cat_case: tuple) -> None:
    cat, geo = cat_case  # 451 × 300, its 224 × 224 centre crop, patch 16
    image = Image.fromarray(cat)
    same_image, same_geo = overlay_module.fit_for_overlay(image, geo, 451)
    assert same_image is image and same_geo is geo
    assert overlay_module.fit_for_overlay(image, geo, None)[1] is geo
    small, small_geo = overlay_module.fit_for_overlay(image, geo, 200)
    assert small.size == (200, 133) and small_geo.source_size == (133, 200)
    assert small_geo.grid == geo.grid and small_geo.input_size == geo.input_size
    # The same as preprocessing the small picture itself: the grid lands on the same place.
    direct = prepare_image(small, Preprocessing((224, 224), "crop", 0.875), 16).geometry
    np.testing.assert_allclose(small_geo.region, direct.region, atol=0.5)
    # A one-hot patch is coloured exactly over its box scaled to the small picture.
    row, col = 4, 9
    map_ = np.zeros(geo.grid, np.float32)
    map_[row, col] = 1.0
    out = np.asarray(overlay_on_image(small, map_, geometry=small_geo, opacity=1.0))
    assert out.shape == (133, 200, 3)
    hot = (out == lookup_table("viridis")[255]).all(axis=-1)
    x0, y0, x1, y1 = geo.patch_box_source(row, col)
    fx, fy = 200 / 451, 133 / 300
    ys, xs = np.mgrid[0:133, 0:200] + 0.5  # pixel centres of the small picture
    in_box = (xs >= x0 * fx) & (xs < x1 * fx) & (ys >= y0 * fy) & (ys < y1 * fy)
    assert in_box.sum() > 9
    np.testing.assert_array_equal(hot, in_box)


# ----------------------------------------------------------------------------- head grid


def test_head_grid_layout_and_shared_scale() -> None:
    layers, heads, gh, gw = 3, 4, 2, 3
    maps = np.zeros((layers, heads, gh, gw), np.float32)
    maps[1, 2, 0, 1] = 5.0  # one hot patch in layer 2, head 3
    maps[0, 0] = 1.0  # weak everywhere in layer 1, head 1
    base = np.full((60, 90, 3), 128, np.uint8)
    tile_w, tile_h, gap = 96, 64, 2

    bare = head_grid_image(maps, base, colormap="grey", opacity=1.0, row_labels=False, gap=gap)
    assert bare.size == (heads * tile_w + (heads - 1) * gap, layers * tile_h + (layers - 1) * gap)
    pixels = np.asarray(bare)

    def tile(layer: int, head: int) -> np.ndarray:
        x, y = head * (tile_w + gap), layer * (tile_h + gap)
        return pixels[y : y + tile_h, x : x + tile_w]

    hot = tile(1, 2)
    assert np.all(hot[: tile_h // 2, tile_w // 3 : 2 * tile_w // 3] == 255)
    assert np.all(hot[tile_h // 2 :] == 0)
    # Shared scale: 1.0 out of 5.0 -> grey level 51, not full white.
    assert np.all(np.abs(tile(0, 0).astype(int) - 51) <= 1)
    assert np.all(tile(2, 3) == 0)
    assert np.all(pixels[:, tile_w : tile_w + gap] == 255)  # white gap

    labelled = head_grid_image(maps, base, colormap="grey", opacity=1.0, gap=gap)
    extra_w = labelled.width - bare.width
    extra_h = labelled.height - bare.height
    assert extra_w > 0 and extra_h > 0
    np.testing.assert_array_equal(np.asarray(labelled)[extra_h:, extra_w:], pixels)
    assert np.asarray(labelled)[:extra_h, extra_w:].min() < 128  # some label ink


def test_head_grid_keeps_aspect() -> None:
    maps = np.random.default_rng(3).random((2, 2, 4, 6))
    base = np.zeros((200, 100, 3), np.uint8)
    tall = head_grid_image(maps, base, tile_width=50, gap=0, row_labels=False, colormap="magma")
    assert tall.size == (100, 200)


# ----------------------------------------------------------------------------- export


def test_save_png_is_atomic(tmp_path: Path) -> None:
    image = Image.fromarray(data.astronaut())
    target = tmp_path / "out.png"
    assert save_png(image, target) == target
    assert [p.name for p in tmp_path.iterdir()] == ["out.png"]
    with Image.open(target) as back:
        assert back.format == "PNG"
        np.testing.assert_array_equal(np.asarray(back), data.astronaut())
    # Overwrite in place works and leaves nothing behind.
    save_png(image.convert("L"), target)
    with Image.open(target) as back:
        assert back.mode == "L"
    assert [p.name for p in tmp_path.iterdir()] == ["out.png"]


def test_failed_save_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "keep.png"
    save_png(Image.new("RGB", (4, 4), (1, 2, 3)), target)
    before = target.read_bytes()

    def broken_save(self, fp, *args, **kwargs) -> None:
        fp.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(Image.Image, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        save_png(Image.new("RGB", (4, 4)), target)
    assert target.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["keep.png"]


def test_nice_levels_start_at_zero_and_round_up() -> None:
    from vitviz.imaging.colormaps import nice_ceil, nice_levels

    for x in (0.0123, 0.07, 0.3, 0.99, 1.0, 3.7, 42.0):
        v = nice_ceil(x)
        assert x <= v <= 1.25 * x + 1e-12
    assert nice_levels(np.array([0.01, 0.2, 0.07])) == (0.0, 0.2)
    assert nice_levels(np.array([0.01, 0.21])) == (0.0, 0.25)
    assert nice_levels(np.array([-1.0, 2.0])) == (-1.0, 2.0)  # signed maps keep min..max
    assert nice_levels(np.array([np.nan])) == (0.0, 1.0)
