"""Numpy helpers over query maps that the kinds, the engine and the window share (no torch)."""

from __future__ import annotations

import numpy as np


def maps_levels(head_maps: np.ndarray, mean_maps: np.ndarray) -> tuple[float, float]:
    """One colour scale for every thumbnail of the head grid (0 to a round number for
    attention, so it stays put while the query moves). (L, H, h, w) and (L, h, w) maps."""
    from vitviz.imaging.colormaps import nice_levels

    ends = []
    for m in (head_maps, mean_maps):
        finite = m[np.isfinite(m)]  # a row a layer lacks (a CaiT's CLS in its SA layers): NaN
        if finite.size:
            ends += [float(finite.min()), float(finite.max())]
    return nice_levels(np.array(ends))
