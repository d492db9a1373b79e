"""Patch geometry on non-square grids: indices, coordinates, boxes."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image
from skimage import data

from vitviz.imaging import PatchGeometry, Preprocessing, prepare_image


@pytest.fixture(scope="module")
def crop_geometry() -> PatchGeometry:
    """Rocket photo (427 × 640) centre-cropped to a 224 × 320 input, patch 16: 14 × 20 grid."""
    image = Image.fromarray(data.rocket())
    return prepare_image(image, Preprocessing((224, 320), "crop", 0.875), 16).geometry


@pytest.fixture(scope="module")
def fit_geometry() -> PatchGeometry:
    """Portrait photo (600 × 400) fitted with patch 14: slightly different x and y scales."""
    image = Image.fromarray(np.ascontiguousarray(data.coffee().transpose(1, 0, 2)))
    return prepare_image(image, Preprocessing((224, 224), "fit"), 14).geometry


def test_grid_and_indices(crop_geometry: PatchGeometry) -> None:
    geo = crop_geometry
    assert geo.grid == (14, 20)
    assert geo.num_patches == 280
    seen = set()
    for index in range(geo.num_patches):
        row, col = geo.row_col(index)
        assert geo.patch_index(row, col) == index
        seen.add((row, col))
    assert len(seen) == 280
    assert geo.patch_index(1, 0) == 20  # row-major over the width
    assert geo.token_index(0, 0, 1) == 1
    assert geo.token_index(2, 3, 5) == 5 + 2 * 20 + 3
    with pytest.raises(IndexError):
        geo.patch_index(14, 0)
    with pytest.raises(IndexError):
        geo.patch_index(0, 20)
    with pytest.raises(IndexError):
        geo.row_col(280)


@pytest.mark.parametrize("which", ["crop_geometry", "fit_geometry"])
def test_coordinate_round_trip(which: str, request: pytest.FixtureRequest) -> None:
    geo: PatchGeometry = request.getfixturevalue(which)
    h0, w0 = geo.source_size
    rng = np.random.default_rng(1)
    for x, y in rng.uniform(0, 1, size=(50, 2)) * [w0, h0]:
        u, v = geo.source_to_input(x, y)
        back = geo.input_to_source(u, v)
        assert back == pytest.approx((x, y), abs=1e-9)
    left, top, right, bottom = geo.region
    assert geo.input_to_source(0, 0) == pytest.approx((left, top))
    h, w = geo.input_size
    assert geo.input_to_source(w, h) == pytest.approx((right, bottom))


@pytest.mark.parametrize("which", ["crop_geometry", "fit_geometry"])
def test_patch_boxes_and_lookup_agree(which: str, request: pytest.FixtureRequest) -> None:
    geo: PatchGeometry = request.getfixturevalue(which)
    gh, gw = geo.grid
    for row in range(gh):
        for col in range(gw):
            x0, y0, x1, y1 = geo.patch_box_source(row, col)
            assert x1 > x0 and y1 > y0
            assert geo.patch_at_source((x0 + x1) / 2, (y0 + y1) / 2) == (row, col)
            # Just inside the corners still hits the same patch.
            eps = 1e-6
            assert geo.patch_at_source(x0 + eps, y0 + eps) == (row, col)
            assert geo.patch_at_source(x1 - eps, y1 - eps) == (row, col)
    # Boxes tile the region exactly.
    assert geo.patch_box_source(0, 0)[:2] == pytest.approx(geo.region[:2])
    assert geo.patch_box_source(gh - 1, gw - 1)[2:] == pytest.approx(geo.region[2:])
    assert geo.patch_box_source(0, 0)[2] == pytest.approx(geo.patch_box_source(0, 1)[0])


def test_outside_the_region_is_none(crop_geometry: PatchGeometry) -> None:
    geo = crop_geometry
    left, top, right, bottom = geo.region
    assert left > 0  # the crop cut the sides of this landscape photo
    assert geo.patch_at_source(left - 0.5, (top + bottom) / 2) is None
    assert geo.patch_at_source(right + 0.5, (top + bottom) / 2) is None
    assert geo.patch_at_source((left + right) / 2, top - 0.5) is None
    assert geo.patch_at_input(-0.1, 0) is None
    assert geo.patch_at_input(320, 0) is None
    assert geo.patch_at_input(319.9, 223.9) == (13, 19)


def test_region_matches_the_pixels(crop_geometry: PatchGeometry) -> None:
    # The centre of patch (5, 7) in the input shows the source pixel its box centre names.
    image = Image.fromarray(data.rocket())
    prepared = prepare_image(image, Preprocessing((224, 320), "crop", 0.875), 16)
    assert prepared.geometry == crop_geometry
    x0, y0, x1, y1 = crop_geometry.patch_box_source(5, 7)
    patch_from_source = image.resize((16, 16), Image.Resampling.BICUBIC, box=(x0, y0, x1, y1))
    patch_in_input = prepared.pixels[5 * 16 : 6 * 16, 7 * 16 : 8 * 16]
    assert np.abs(np.asarray(patch_from_source).astype(int) - patch_in_input).mean() < 3


def test_remainder_pixels_are_outside_the_grid() -> None:
    geo = PatchGeometry.identity((40, 50), 16)
    assert geo.grid == (2, 3)
    assert geo.patch_at_input(47.0, 10.0) == (0, 2)
    assert geo.patch_at_input(48.5, 10.0) is None
    assert geo.patch_at_input(10.0, 33.0) is None
    assert geo.covered_region() == (0.0, 0.0, 48.0, 32.0)


def test_invalid_geometry() -> None:
    with pytest.raises(ValueError):
        PatchGeometry((224, 224), 0, (10, 10), (0, 0, 10, 10))
    with pytest.raises(ValueError):
        PatchGeometry((224, 224), 16, (10, 10), (5, 0, 5, 10))
