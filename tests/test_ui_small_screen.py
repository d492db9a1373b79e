"""1280 × 720 is a first-class size: the Training tab's plots at least 120 px tall, a prompt
box showing five prompts that grows with more, grid lines that fade when the cells are small on
screen, and a Training form showing only the chosen model kind's fields."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyqtgraph as pg
import pytest
from PySide6.QtCore import QSettings

from vitviz.ui.canvas import GRID_ALPHA, ImageCanvas, grid_alpha
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
