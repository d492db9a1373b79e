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


class CountAxis(pg.AxisItem):
    """An axis that counts (epochs): ticks at whole numbers only, never "0.2 … 0.8" over a
    short range (an empty plot's 0 to 1, a run's first epoch)."""

    def __init__(self, orientation: str = "bottom", **kwargs: object) -> None:
        super().__init__(orientation, **kwargs)
        self.enableAutoSIPrefix(False)

    def tickSpacing(self, minVal: float, maxVal: float, size: float) -> list:
        levels = super().tickSpacing(minVal, maxVal, size)
        whole = [(s, o) for s, o in levels if s >= 1 and float(s).is_integer()]
        return whole or [(1.0, 0.0)]
