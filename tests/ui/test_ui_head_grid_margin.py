"""The head grid keeps inside its panel with a margin all round: the shipped 4 × 4 model's grid
in the window at 1366 × 768 and 1920 × 1080 (where its width, not its height, sets the tiles'
size), and grids of other shapes in views wide and tall."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyqtgraph as pg
import pytest
from PySide6.QtCore import QRectF, QSettings

from vitviz.core import resources
from vitviz.ui.head_grid import MEAN, HeadGrid
from vitviz.ui.main_window import MainWindow
from vitviz.ui.settings import AppSettings

MARGIN_PX = 4  # at least this much room between any item and the grid's edges


def _items_px(grid: HeadGrid) -> list[tuple[str, QRectF]]:
    """(what, its rectangle in the grid's widget pixels): every tile, every label shown."""
    out = []
    for layer, heads in enumerate(grid.row_heads()):
        for head in (MEAN, *range(heads)):
            out.append((f"tile {layer}.{head}", grid.tile_rect_px(layer, head)))
    labels = [*grid._row_labels, *(i for v in grid._column_labels.values() for i in v)]
    for item in labels:
        if item.isVisible():
            m = item.textItem.document().documentMargin()  # room the text box keeps round it
            text = item.textItem.mapRectToScene(item.textItem.boundingRect().adjusted(m, m, -m, -m))
            out.append((f"label {item.toPlainText()}", grid.mapFromScene(text).boundingRect()))
    return out


def _outside(grid: HeadGrid) -> list[str]:
    inner = QRectF(grid.rect()).adjusted(MARGIN_PX, MARGIN_PX, -MARGIN_PX, -MARGIN_PX)
    return [f"{what}: {rect} not in {inner}" for what, rect in _items_px(grid)
            if not inner.contains(rect)]  # fmt: skip


@pytest.fixture
def window(qtbot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> MainWindow:
    monkeypatch.setenv("VITVIZ_DATA_DIR", str(tmp_path / "data"))
    pg.setConfigOptions(imageAxisOrder="row-major", antialias=True)
    w = MainWindow(AppSettings(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)))
    qtbot.addWidget(w)
    w.show()
    qtbot.waitExposed(w)
    w.start([])
    return w


@pytest.mark.parametrize("size", [(1366, 768), (1920, 1080)])
def test_the_shipped_models_grid_stays_inside_its_panel(qtbot, window, size) -> None:
    from test_ui_window import drop, wait_shown

    window.resize(*size)
    image = resources.sample_images()[0]
    drop(window, [image, resources.default_model_path()])
    wait_shown(qtbot, window, image.name)
    qtbot.wait(200)  # the grid lays itself out on a timer
    grid = window.viewer.head_grid
    assert grid.shape == (4, 4)
    assert _outside(grid) == []
    bar = grid.colorbar.sceneBoundingRect()
    assert QRectF(grid.rect()).contains(grid.mapFromScene(bar).boundingRect())


@pytest.mark.parametrize("size", [(1500, 300), (500, 900), (900, 300)])
@pytest.mark.parametrize(("layers", "heads", "patches"), [(4, 4, (8, 8)), (12, 12, (14, 14))])
def test_a_grid_stays_inside_its_view(qtbot, size, layers, heads, patches) -> None:
    pg.setConfigOptions(imageAxisOrder="row-major")
    grid = HeadGrid()
    qtbot.addWidget(grid)
    grid.resize(*size)
    grid.show()
    qtbot.waitExposed(grid)
    grid.set_layout(layers, heads, patches, np.zeros((56, 56, 3), np.uint8))
    qtbot.wait(20)  # the re-layout for the widget's size runs on a timer
    assert _outside(grid) == []
