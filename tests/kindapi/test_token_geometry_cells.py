"""TokenGeometry.cell_from: a cell of one model's grid read on another's at the same place of
the picture (the compare window's query, DESIGN §5 "Compare")."""

from __future__ import annotations

import pytest

from vitviz.kindapi.grids import LayerGrid, TokenGeometry


def _geometry(size: tuple[int, int], cell: int) -> TokenGeometry:
    grid = (size[0] // cell, size[1] // cell)
    return TokenGeometry(size, grid, cell, (LayerGrid(grid, cell),))


@pytest.mark.parametrize(
    ("a", "b", "cell", "expected"),
    [
        # the same grid: the same cell
        ((64, 64, 8), (64, 64, 8), (2, 3), (2, 3)),
        # a finer grid on the same input: A's centre (20, 28) px lies in B's 4 px cell (5, 7)
        ((64, 64, 8), (64, 64, 4), (2, 3), (5, 7)),
        # a coarser grid: A's 4 px cell (5, 7), centre (22, 30), in B's 16 px cell (1, 1)
        ((64, 64, 4), (64, 64, 16), (5, 7), (1, 1)),
        # another input size: A's centre (20, 28) of 64 is (70, 98) of 224, B's 16 px (4, 6)
        ((64, 64, 8), (224, 224, 16), (2, 3), (4, 6)),
        # a non-square input: rows and columns each scaled by their own side
        ((64, 64, 8), (32, 128, 8), (7, 7), (3, 15)),
    ],
)
def test_a_cell_is_read_at_the_same_place_of_the_picture(a, b, cell, expected) -> None:
    geometry_a, geometry_b = _geometry(a[:2], a[2]), _geometry(b[:2], b[2])
    assert geometry_b.cell_from(cell, geometry_a) == expected
