"""pyqtgraph colour maps built from vitviz.imaging.colormaps, the single source of colours."""

from __future__ import annotations

from functools import cache

import numpy as np
import pyqtgraph as pg

from vitviz.imaging.colormaps import COLORMAPS, lookup_table

__all__ = ["COLORMAPS", "colormap", "lut", "set_colorbar_levels"]


@cache
def colormap(name: str) -> pg.ColorMap:
    table = lookup_table(name, 256)
    return pg.ColorMap(np.linspace(0.0, 1.0, 256), table, name=name)


@cache
def lut(name: str) -> np.ndarray:
    """(256, 3) uint8 lookup table for ImageItem.setLookupTable."""
    return lookup_table(name, 256)


def set_colorbar_levels(colorbar: pg.ColorBarItem, levels: tuple[float, float]) -> None:
    """Give ``colorbar`` (and its images) new levels; its axis is redrawn only when they change."""
    if tuple(colorbar.levels()) != tuple(levels):
        colorbar.setLevels(levels)
