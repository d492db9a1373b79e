"""The head grid's state: with the layers wrapped into bands, the selected head's column label is
marked in the band that holds the selected layer only, never in every band; a new model's
layout drops the last model's thumbnails until its own maps come."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtGui import QColor

from vitviz.ui.head_grid import LABEL_COLOR, SELECTED_COLOR, HeadGrid


def marked(item: pg.TextItem) -> bool:
    color = item.color.name()
    assert color in (QColor(SELECTED_COLOR).name(), QColor(LABEL_COLOR).name())
    return color == QColor(SELECTED_COLOR).name() and item.textItem.font().bold()


def test_a_new_models_layout_drops_the_last_models_maps(qtbot) -> None:
    grid = HeadGrid()
    qtbot.addWidget(grid)
    grid.resize(600, 400)
    grid.show()
    qtbot.waitExposed(grid)
    pixels = np.zeros((32, 32, 3), np.uint8)
    grid.set_layout(2, 2, (4, 4), pixels)
    heads, means = np.full((2, 2, 4, 4), 0.5, np.float32), np.full((2, 4, 4), 0.5, np.float32)
    grid.set_maps(heads, means, (0.0, 1.0), "viridis", 1.0)
    grid.set_layout(2, 2, (4, 4), pixels)  # another image of the same model: the maps stay
    assert grid.maps.image is not None
    grid.set_layout(6, 3, (8, 8), pixels)  # another model: 6 layers of 3 heads, 8 × 8
    assert grid.maps.image is None
    centre = grid.tile_center(5, 2)  # a tile the last model did not have
    layer, head, value = grid.hover_info(centre)
    assert (layer, head) == (5, 2) and np.isnan(value)
    grid.set_maps(
        np.ones((6, 3, 8, 8), np.float32), np.ones((6, 8, 8), np.float32), (0, 2), "viridis", 1
    )
    assert grid.hover_info(centre)[2] == 1.0


def test_a_selected_head_is_marked_in_its_layers_band_only(qtbot) -> None:
    grid = HeadGrid()
    qtbot.addWidget(grid)
    grid.resize(1400, 320)  # wide and low: the 12 layers wrap into bands
    grid.show()
    qtbot.waitExposed(grid)
    grid.set_layout(12, 4, (14, 14), np.zeros((56, 56, 3), np.uint8))
    layout = grid.layout
    assert layout.bands >= 2
    column = 2 + 1  # head 3 (column 0 is the mean)
    labels = grid._column_labels[column]
    assert len(labels) == layout.bands  # one label of the column per band
    for layer in (layout.rows + 1, 1, layout.layers - 1):  # band 1, band 0, the last band
        grid.set_selection(layer, 2)
        band = layer // layout.rows
        assert [marked(item) for item in labels] == [b == band for b in range(layout.bands)]
        rows = [marked(item) for item in grid._row_labels]
        assert rows == [i == layer for i in range(layout.layers)]
        mean = grid._column_labels[0]
        assert not any(marked(item) for item in mean)
    grid.set_selection(layout.rows, -1)  # the mean of heads in band 1
    assert [marked(item) for item in grid._column_labels[0]] == [
        b == 1 for b in range(layout.bands)
    ]
    assert not any(marked(item) for item in labels)
