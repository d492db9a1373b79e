"""The staged kinds' shared query maps (``vitviz.kinds.staged_engine``) on a hand-made analysis:
two layers of different grids and heads, checked against the nearest resampling, the per-layer
head mean, the NaN padding and the prefix shares written out by hand."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from vitviz.kinds.staged_engine import (
    LayerRows,
    finest_thumbnail,
    staged_query_maps,
)


def _analysis() -> SimpleNamespace:
    # layer 0: 3 heads on a 4×4 grid of 8 px cells; layer 1: 2 heads on a 2×2 grid of 16 px
    return SimpleNamespace(
        attentions=[torch.zeros(3, 16, 16), torch.zeros(2, 4, 4)],
        stage_grids=[(4, 4), (2, 2)],
        stage_pixels=[8, 16],
    )


def _rows(heads: int, side: int) -> np.ndarray:
    return np.arange(heads * side * side, dtype=np.float32).reshape(heads, side, side) / 10


def test_query_maps_resample_pad_and_share() -> None:
    a = _analysis()
    rows0, rows1 = _rows(3, 4), _rows(2, 2) + 5
    prefix0 = np.array([[0.1], [0.2], [0.3]], dtype=np.float32)
    layers = [LayerRows(rows0, 8, 5, prefix0), LayerRows(rows1, 16, 1, None)]
    maps = staged_query_maps(a, (1, 1), ((2, 2), 16), 1, lambda i: layers[i])

    # the thumbnail is the coarse grid: layer 0 read at each 16 px cell's centre (8 px cells)
    expected0 = rows0[:, [1, 3]][:, :, [1, 3]]
    np.testing.assert_array_equal(maps.head_maps[0], expected0)
    np.testing.assert_array_equal(maps.head_maps[1, :2], rows1)
    assert np.isnan(maps.head_maps[1, 2]).all()  # layer 1 has 2 heads of the 3
    np.testing.assert_allclose(maps.mean_maps[1], rows1.mean(axis=0))
    np.testing.assert_allclose(maps.mean_maps[0], expected0.mean(axis=0))
    np.testing.assert_array_equal(maps.prefix_attention[0], prefix0)
    assert np.isnan(maps.prefix_attention[1]).all()  # a layer with no prefix key
    assert maps.query_tokens == (5, 1)
    assert maps.layer_maps[0] is rows0
    assert maps.levels[0] <= 0.0 and maps.levels[-1] >= float(rows1.max())


def test_query_off_the_grid_is_refused() -> None:
    with pytest.raises(ValueError, match="outside the 4×4 grid"):
        staged_query_maps(_analysis(), (4, 0), ((2, 2), 16), 0, lambda i: None)  # type: ignore[arg-type, return-value]


def test_finest_thumbnail_takes_the_finest_small_grid() -> None:
    a = _analysis()
    assert finest_thumbnail(a) == ((4, 4), 8)
    a.stage_grids = [(64, 64), (40, 40)]
    assert finest_thumbnail(a) == ((40, 40), 16)  # none within 32 cells: the last
    a.stage_grids = [(64, 64), (32, 32)]
    assert finest_thumbnail(a) == ((32, 32), 16)
