"""The Training tab before any run: its loss and accuracy plots say "No run yet" over whole
epochs (0 to the planned number), never "epoch 0.2 … 0.8"; a run's first epoch hides the note
and its whole-number ticks stay whole over a short run (epochs 1 to 2)."""

from __future__ import annotations

from pathlib import Path

import pyqtgraph as pg
import pytest
from PySide6.QtCore import QSettings

from vitviz.ui.plot_axes import CountAxis
from vitviz.ui.settings import AppSettings
from vitviz.ui.training_tab import NO_RUN_NOTE, TrainingTab


def _ticks(plot: pg.PlotWidget) -> list[float]:
    axis = plot.getPlotItem().getAxis("bottom")
    lo, hi = axis.range
    values = [v for _spacing, vs in axis.tickValues(lo, hi, axis.width() or 400) for v in vs]
    return sorted(values)


@pytest.fixture
def tab(qtbot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> TrainingTab:
    monkeypatch.setenv("VITVIZ_DATA_DIR", str(tmp_path / "data"))
    t = TrainingTab()
    t.app_settings = AppSettings(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    qtbot.addWidget(t)
    t.resize(1200, 700)
    t.show()
    qtbot.waitExposed(t)
    return t


def test_empty_plots_count_whole_epochs_and_say_no_run(qtbot, tab: TrainingTab) -> None:
    tab.epochs_box.setValue(10)
    for plot in (tab.loss_plot, tab.acc_plot):
        assert isinstance(plot.getPlotItem().getAxis("bottom"), CountAxis)
        ticks = _ticks(plot)
        assert ticks and all(float(v).is_integer() for v in ticks), ticks
        assert ticks[0] == 0 and ticks[-1] == 10  # 0 to the planned epochs
        note = tab.empty_notes[plot]
        assert note.isVisible() and note.textItem.toPlainText() == NO_RUN_NOTE
    # a two-epoch run's points: the note goes, the ticks stay whole over 1 to 2
    rows = [
        dict(epoch=e, train_loss=1.0 / e, val_loss=1.2 / e, train_acc=0.3 * e, val_acc=0.25 * e)
        for e in (1, 2)
    ]
    tab._draw_epochs(rows)
    for plot in (tab.loss_plot, tab.acc_plot):
        assert not tab.empty_notes[plot].isVisible()
        plot.getPlotItem().getViewBox().updateAutoRange()
        lo, hi = plot.getPlotItem().getViewBox().viewRange()[0]
        assert lo < 1.1 and hi > 1.9  # the curves' epochs in view
        ticks = _ticks(plot)
        assert ticks and all(float(v).is_integer() for v in ticks), ticks
    tab._reset_monitor()  # nothing again: the note back
    assert tab.empty_notes[tab.loss_plot].isVisible()
