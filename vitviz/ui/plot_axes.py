"""Plot axes that write their numbers as they are."""

from __future__ import annotations

import pyqtgraph as pg

SIDES = ("left", "bottom", "right", "top")


def plain_axes(plot: pg.PlotWidget | pg.PlotItem) -> None:
    """Every axis of ``plot`` without pyqtgraph's automatic SI prefix: an axis that counts
    (heads, layers, epochs, classes) over a range under 1 (one head's column, -0.5 to 0.5)
    would read "head (x0.001)", its numbers scaled by 1000."""
    item = plot.getPlotItem() if isinstance(plot, pg.PlotWidget) else plot
    for side in SIDES:
        item.getAxis(side).enableAutoSIPrefix(False)
