"""1280 × 720 is a first-class size: the Training tab's plots at least 120 px tall, a prompt
box showing five prompts that grows with more, grid lines that fade when the cells are small on
screen, a Training form showing only the chosen model kind's fields, and a 12 × 12 head grid's
tiles at least 32 px. At 1000 × 650 no title or label is cut."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyqtgraph as pg
import pytest
from PySide6.QtCore import QSettings

from vitviz.ui.canvas import GRID_ALPHA, ImageCanvas, fitted_title, grid_alpha
from vitviz.ui.main_window import MainWindow
from vitviz.ui.prompt_box import PromptBox
from vitviz.ui.settings import AppSettings

SMALL = (1280, 720)


@pytest.fixture
def window(qtbot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> MainWindow:
    monkeypatch.setenv("VITVIZ_DATA_DIR", str(tmp_path / "data"))
    pg.setConfigOptions(imageAxisOrder="row-major", antialias=True)
    w = MainWindow(AppSettings(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)))
    qtbot.addWidget(w)
    w.resize(*SMALL)
    w.show()
    qtbot.waitExposed(w)
    w.start([])
    return w


def test_training_plots_are_tall_enough(qtbot, window: MainWindow) -> None:
    window.tabs.setCurrentWidget(window.training)
    qtbot.wait(100)
    tab = window.training
    for plot in (tab.loss_plot, tab.acc_plot):
        assert plot.getPlotItem().vb.height() >= 120, plot.getPlotItem().vb.height()


def test_the_form_shows_only_the_chosen_kinds_fields(qtbot, window: MainWindow) -> None:
    tab = window.training
    window.tabs.setCurrentWidget(tab)
    tab.model_choice.setCurrentText("vit")
    assert tab.dim.isVisibleTo(tab) and not tab.window_size.isVisibleTo(tab)
    tab.model_choice.setCurrentText("swin")
    assert tab.window_size.isVisibleTo(tab) and not tab.dim.isVisibleTo(tab)
    tab.model_choice.setCurrentText("vit")
    assert tab.dim.isVisibleTo(tab) and not tab.window_size.isVisibleTo(tab)


def test_prompt_box_shows_five_and_grows(qtbot) -> None:
    box = PromptBox()
    qtbot.addWidget(box)
    line = box.edit.fontMetrics().lineSpacing()
    assert box.edit.height() >= 5 * line
    box.set_text(tuple(f"prompt {i}" for i in range(9)))
    assert box.edit.height() >= 10 * line  # nine prompts and room for the next


def test_grid_lines_fade_with_small_cells(qtbot) -> None:
    assert grid_alpha(40) == GRID_ALPHA and grid_alpha(2) == 0
    assert 0 < grid_alpha(10) < GRID_ALPHA
    canvas = ImageCanvas("t")
    qtbot.addWidget(canvas)
    canvas.set_image(np.zeros((224, 224, 3), np.uint8), (0, 0, 224, 224), (56, 56))
    assert canvas.grid_lines.cell == pytest.approx(4.0)


@pytest.fixture
def ckpt_12x12(tmp_path: Path) -> Path:
    """A 12-layer × 12-head ViT with a 14 × 14 patch grid, as a ViT-B/16's (small width)."""
    from conftest import random_vit

    from vitviz.checkpoints import save_checkpoint

    model = random_vit(depth=12, heads=12, dim=48, image_size=56, patch_size=4)
    return save_checkpoint(model, tmp_path / "vit12x12.safetensors", class_names=list("abcde"))


def _show(qtbot, window: MainWindow, ckpt: Path, image: Path) -> None:
    from test_ui_window import drop, wait_shown

    drop(window, [image, ckpt])
    wait_shown(qtbot, window, image.name)
    qtbot.wait(200)  # the grid lays itself out on a timer


def test_twelve_by_twelve_tiles_are_32_px(qtbot, window, ckpt_12x12, photo_files) -> None:
    _show(qtbot, window, ckpt_12x12, photo_files["chelsea"])
    grid = window.viewer.head_grid
    for layer, head in ((0, -1), (11, 11), (5, 11), (6, 0)):
        tile = grid.tile_rect_px(layer, head)
        assert min(tile.width(), tile.height()) >= 32, (layer, head, tile)
        assert grid.rect().toRectF().contains(tile)  # on screen, not scrolled off
    views = window.viewer.views_splitter
    assert min(views.sizes()) >= 300 and views.height() >= 280  # the views keep their room


def test_titles_and_labels_read_in_full_at_1000x650(qtbot, window, tiny_ckpt, photo_files):
    from ui_fit import clipped_widgets

    window.resize(1000, 650)
    _show(qtbot, window, tiny_ckpt, photo_files["chelsea"])
    v = window.viewer
    assert clipped_widgets(window) == []  # the views' titles included: shortened to fit
    for view in (v.input_view, v.map_view):
        assert view.title.fontMetrics().horizontalAdvance(view.title.text()) <= view.width()
        if view.title.text() != view.full_title:  # shortened: whole in its tooltip
            assert view.title.toolTip() == view.full_title
    scroll = v.right_tabs.currentWidget()
    assert scroll.horizontalScrollBar().maximum() == 0  # the side panel is never cut sideways


def test_a_title_that_does_not_fit_loses_its_last_parts(qtbot) -> None:
    from PySide6.QtGui import QFont, QFontMetrics

    fm = QFontMetrics(QFont())
    text = "Model input · click a patch to make it the query"
    assert fitted_title(text, fm, 10_000) == text
    short = fitted_title(text, fm, fm.horizontalAdvance("Model input · click a p"))
    assert short == "Model input …"
    assert fm.horizontalAdvance(fitted_title(text, fm, 40)) <= 40
