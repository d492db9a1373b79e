"""pyqtgraph colour maps built from vitviz.imaging.colormaps, the single source of colours, and
the colour bars that show them."""

from __future__ import annotations

import math
from functools import cache

import numpy as np
import pyqtgraph as pg
from PySide6.QtGui import QFont, QFontMetrics

from vitviz.imaging.colormaps import COLORMAPS, lookup_table, scale_ticks

__all__ = ["COLORMAPS", "colormap", "lut", "make_colorbar", "set_colorbar_levels"]

BAR_WIDTH = 14  # pixels of colour
WIDTH_SAMPLE = "0.0125"  # the numbers' column right of the colour is at least this wide


@cache
def colormap(name: str) -> pg.ColorMap:
    table = lookup_table(name, 256)
    return pg.ColorMap(np.linspace(0.0, 1.0, 256), table, name=name)


@cache
def lut(name: str) -> np.ndarray:
    """(256, 3) uint8 lookup table for ImageItem.setLookupTable."""
    return lookup_table(name, 256)


def _tick_metrics(colorbar: pg.ColorBarItem) -> QFontMetrics:
    font = colorbar.axis.style.get("tickFont")
    return QFontMetrics(font if isinstance(font, QFont) else QFont())


def make_colorbar(
    image: pg.ImageItem, cmap: str = "viridis", horizontal: bool = False
) -> pg.ColorBarItem:
    """A fixed (not draggable) colour bar driving ``image``'s colours, vertical (labels on its
    right) or ``horizontal`` (labels below), with room past its ends for the half of its end
    labels that reaches beyond the bar."""
    colorbar = pg.ColorBarItem(
        values=(0, 1),
        colorMap=colormap(cmap),
        interactive=False,
        width=BAR_WIDTH,
        orientation="horizontal" if horizontal else "vertical",
    )
    colorbar.setImageItem(image)
    colorbar.axis.enableAutoSIPrefix(False)  # the numbers as they are, never "(x1e-05)"
    fm = _tick_metrics(colorbar)
    if horizontal:  # the end labels drawn past the axis's ends, into these margins
        half = math.ceil(fm.horizontalAdvance(WIDTH_SAMPLE) / 2) + 2
        colorbar.layout.setContentsMargins(half, 1, half, 1)
        colorbar.axis.setStyle(hideOverlappingLabels=False)
    else:
        half = math.ceil(fm.height() / 2) + 2
        colorbar.layout.setContentsMargins(1, half, 1, half)
    return colorbar


def set_colorbar_levels(
    colorbar: pg.ColorBarItem,
    levels: tuple[float, float],
    ticks: list[tuple[float, str]] | None = None,
    label: str = "",
) -> None:
    """Give ``colorbar`` (and its images) new levels, labelled at both ends and at round values
    between (``scale_ticks``) unless ``ticks`` are given; ``label`` is written along the bar.
    The axis is redrawn only when something changed. It is as wide as its labels, at least
    WIDTH_SAMPLE's width, and only grows while the label stays: a new query re-lays nothing out."""
    ticks = scale_ticks(levels) if ticks is None else ticks
    before = getattr(colorbar, "_vitviz_scale", None)
    if before == (tuple(levels), tuple(ticks), label):
        return
    colorbar._vitviz_scale = (tuple(levels), tuple(ticks), label)  # type: ignore[attr-defined]
    colorbar.setLevels(levels)
    axis = colorbar.axis
    axis.setTicks([ticks])
    if label:
        axis.setLabel(label)
    else:
        axis.showLabel(False)
    fm = _tick_metrics(colorbar)
    same_label = before is not None and before[2] == label
    if getattr(colorbar, "horizontal", False):  # the labels' one line below the bar
        room = fm.height() + axis.style["tickTextOffset"][1] + max(0, axis.style["tickLength"])
        room += 4 + (fm.height() + 4 if label else 0)
        if room > axis.height() or not same_label:
            axis.setHeight(room)
        return
    widest = max(fm.horizontalAdvance(text) for text in [t for _, t in ticks] + [WIDTH_SAMPLE])
    room = widest + axis.style["tickTextOffset"][0] + max(0, axis.style["tickLength"]) + 4
    if label:
        room += fm.height() + 4
    if room > axis.width() or not same_label:
        axis.setWidth(room)
