"""Every plot of the window writes its axis numbers as they are: an axis that counts heads,
layers, blocks or epochs over a range under 1 (the compare window's one column of averaged
heads spans -0.5 to 0.5) never reads "head (x0.001)" with its numbers scaled by 1000."""

from __future__ import annotations

from pathlib import Path

import pyqtgraph as pg
from test_ui_window import new_window

from vitviz.ui.compare_window import CompareWindow
from vitviz.ui.plot_axes import SIDES


def test_no_axis_label_gets_an_automatic_scale(qtbot, tmp_path: Path) -> None:
    window = new_window(qtbot, tmp_path / "settings.ini")
    compare = CompareWindow(window.client, window)
    plots = window.findChildren(pg.PlotWidget) + compare.findChildren(pg.PlotWidget)
    labelled = []
    for plot in plots:
        for side in SIDES:
            axis = plot.getPlotItem().getAxis(side)
            if not axis.label.isVisible() or not axis.labelText:
                continue
            axis.setRange(-0.5, 0.5)  # one head (or layer) centred on 0
            labelled.append(axis.labelString())
            assert "(x" not in axis.labelString(), axis.labelString()
    heads = compare.heads.getAxis("bottom")  # the compare grid's head axis among them
    assert heads.labelString() in labelled and "head" in heads.labelString()
    assert len(labelled) >= 10, labelled  # predictions, statistics, lens, curves, training


def test_the_logit_lens_top_tick_is_whole_in_a_short_chart(qtbot) -> None:
    """The Features tab's logit lens at 1366 × 768 is about 150 px tall: its "1" on the p axis
    lies far enough below the chart's top edge to be drawn whole (it was cut in half)."""
    from PySide6.QtCore import QPointF
    from PySide6.QtGui import QFont, QFontMetrics

    from vitviz.ui.logit_lens_chart import LogitLensChart

    chart = LogitLensChart()
    qtbot.addWidget(chart)
    chart.resize(1340, 150)
    chart.show()
    qtbot.waitExposed(chart)
    vb = chart.getPlotItem().vb
    qtbot.waitUntil(lambda: vb.height() > 0)
    top = chart.mapFromScene(vb.mapViewToScene(QPointF(0.0, 1.0))).y()
    axis = chart.getAxis("left")
    half = QFontMetrics(axis.style.get("tickFont") or QFont()).height() / 2
    assert top >= half, (top, half)
