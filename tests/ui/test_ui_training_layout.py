"""The Training tab on a laptop and a desktop screen: every text readable, Start and Cancel in the
window, rarely changed settings folded away, the settings never cut at the right edge; the mouse
wheel changes no control it merely passes over."""

from __future__ import annotations

from pathlib import Path

import pyqtgraph as pg
import pytest
from PySide6.QtCore import QPoint, QSettings
from PySide6.QtWidgets import (
    QComboBox,
    QScrollArea,
    QSlider,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)
from ui_fit import clipped_widgets, inside_window, turn_wheel

from vitviz.training.config import KIND_FIELDS, training_side
from vitviz.ui.main_window import MainWindow
from vitviz.ui.settings import AppSettings
from vitviz.ui.training_tab import FIELDS
from vitviz.ui.wheel_guard import guard_wheel

KIND_NAMES = {f.name for f in KIND_FIELDS}
SIZES = [(1366, 768), (1400, 900), (1920, 1080)]  # a laptop, the size in the issue, a desktop


@pytest.fixture
def window(qtbot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> MainWindow:
    monkeypatch.setenv("VITVIZ_DATA_DIR", str(tmp_path / "data"))
    pg.setConfigOptions(imageAxisOrder="row-major")
    w = MainWindow(AppSettings(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)))
    qtbot.addWidget(w)
    w.show()
    qtbot.waitExposed(w)
    w.tabs.setCurrentWidget(w.training)
    return w


def settle(qtbot) -> None:
    """Let queued layout requests run (a fold opened, the window resized)."""
    qtbot.wait(50)


def cut_at_right(tab) -> list[str]:
    """Settings widgets that reach past the right edge of the scroll area's viewport."""
    viewport = tab.settings_scroll.viewport()
    found = []
    for widget in tab.settings_scroll.widget().findChildren(QWidget):
        if not widget.isVisible() or widget.parentWidget() is None:
            continue
        left = widget.mapTo(viewport, QPoint(0, 0)).x()
        if left + widget.width() > viewport.width():
            found.append(f"{type(widget).__name__} ends at {left + widget.width()} px")
    return found


def assert_fits(window: MainWindow) -> None:
    tab = window.training
    assert clipped_widgets(window) == []
    for button in (tab.start_button, tab.cancel_button):
        assert button.isVisible() and inside_window(button, window), button.text()
    assert cut_at_right(tab) == []
    assert not tab.settings_scroll.horizontalScrollBar().isVisible()


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_training_tab_fits_the_screen(qtbot, window: MainWindow, size: tuple[int, int]) -> None:
    window.resize(*size)
    settle(qtbot)
    assert window.size().toTuple() == size
    tab = window.training
    assert_fits(window)
    # the fields of the chosen model kind (the shared ones and its own); another kind's hidden
    own = {f.name for f in training_side(tab.model_choice.currentText()).fields}
    shown = [f for f in FIELDS if f.field not in KIND_NAMES or f.field in own]
    others = [f for f in FIELDS if f not in shown]
    more = [f for f in shown if f.more]
    assert more and not any(getattr(tab, f.attr).isVisible() for f in more)  # folded away
    assert all(getattr(tab, f.attr).isVisible() for f in shown if not f.more)
    for group in tab.groups.values():
        group.set_expanded(True)
    settle(qtbot)
    assert all(getattr(tab, f.attr).isVisible() for f in more)
    assert others and not any(getattr(tab, f.attr).isVisible() for f in others)
    assert_fits(window)  # every fold open: still readable, Start and Cancel still in the window


def test_a_long_problem_or_status_wraps_instead_of_being_cut(qtbot, window: MainWindow) -> None:
    window.resize(1366, 768)
    tab = window.training
    tab.dim.setValue(30)
    tab.heads.setValue(4)
    tab.image_size.setValue(20)
    assert tab.start() is False
    tab.status.setText("Failed: " + "a very long reason why the run could not go on " * 4)
    settle(qtbot)
    assert tab.problems.isVisible() and tab.problems.text()
    assert_fits(window)


def test_wheel_over_an_unfocused_control_leaves_its_value(qtbot, window: MainWindow) -> None:
    tab = window.training
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow)
    tab.dataset_kind.setCurrentIndex(1)
    tab.depth.setValue(6)
    for control, read in (
        (tab.dataset_kind, tab.dataset_kind.currentIndex),
        (tab.depth, tab.depth.value),
    ):
        before = read()
        tab.start_button.setFocus()
        turn_wheel(control, -1)
        assert read() == before, type(control).__name__
        control.setFocus()
        qtbot.waitUntil(control.hasFocus)
        turn_wheel(control, -1)
        assert read() != before, type(control).__name__  # focused: the wheel works as usual


def test_guard_wheel_passes_the_wheel_on_to_the_scrolling_panel(qtbot) -> None:
    """Any panel (the Viewer's too): the wheel over a guarded control scrolls the panel."""
    scroll = QScrollArea()
    panel = QWidget()
    layout = QVBoxLayout(panel)
    combo, spin, slider = QComboBox(), QSpinBox(), QSlider()
    combo.addItems(["a", "b", "c"])
    combo.setCurrentIndex(1)
    spin.setValue(50)
    slider.setValue(50)
    for control in (combo, spin, slider):
        layout.addWidget(control)
    layout.addSpacing(3000)
    scroll.setWidget(panel)
    scroll.resize(200, 300)
    qtbot.addWidget(scroll)
    assert guard_wheel(scroll) == 3
    assert guard_wheel(scroll) == 3  # again (after adding widgets): no second filter
    scroll.show()
    qtbot.waitExposed(scroll)
    bar = scroll.verticalScrollBar()
    for control in (combo, spin, slider):
        bar.setValue(bar.maximum() // 2)
        before = bar.value()
        turn_wheel(control, -1)
        assert bar.value() > before, type(control).__name__  # the panel scrolled
    assert (combo.currentIndex(), spin.value(), slider.value()) == (1, 50, 50)
