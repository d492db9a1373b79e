"""Colormaps without matplotlib: evenly spaced anchor colours, linear interpolation between them.

This is the single source of colours: exports use ``apply_colormap``, the window builds its
colormaps from ``lookup_table``.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

__all__ = ["COLORMAPS", "apply_colormap", "lookup_table"]

# Anchors sit at 0, 1/(k-1), ..., 1.
_ANCHORS: dict[str, tuple[str, ...]] = {
    "viridis": (
        "#440154", "#472d7b", "#3b528b", "#2c728e", "#21918c",
        "#28ae80", "#5ec962", "#addc30", "#fde725",
    ),
    "inferno": (
        "#000004", "#1f0c48", "#550f6d", "#88226a", "#ba3655",
        "#e35933", "#f98e09", "#f9c932", "#fcffa4",
    ),
    "magma": (
        "#000004", "#1c1044", "#4f127b", "#812581", "#b5367a",
        "#e55064", "#fb8861", "#fec287", "#fcfdbf",
    ),
    "jet": (
        "#000080", "#0000ff", "#0080ff", "#15ffe2", "#7bff7b",
        "#e2ff15", "#ff9700", "#ff2100", "#800000",
    ),
    "grey": ("#000000", "#ffffff"),
    "coolwarm": (  # diverging: effects of either sign around a neutral 0 (head effects)
        "#3b4cc0", "#6f92f3", "#aac7fd", "#dddcdc", "#f7b89c", "#e7745b", "#b40426",
    ),
}  # fmt: skip

COLORMAPS: tuple[str, ...] = tuple(_ANCHORS)


def _check_name(name: str) -> tuple[str, ...]:
    if name not in _ANCHORS:
        raise ValueError(f"unknown colormap {name!r}; known: {', '.join(COLORMAPS)}")
    return _ANCHORS[name]


def _hex_to_rgb(code: str) -> tuple[int, int, int]:
    code = code.lstrip("#")
    return int(code[0:2], 16), int(code[2:4], 16), int(code[4:6], 16)


@lru_cache(maxsize=32)
def _table(name: str, n: int) -> np.ndarray:
    anchors = np.array([_hex_to_rgb(c) for c in _check_name(name)], dtype=np.float64)
    where = np.linspace(0.0, 1.0, len(anchors))
    t = np.linspace(0.0, 1.0, n)
    table = np.stack([np.interp(t, where, anchors[:, c]) for c in range(3)], axis=1)
    out = np.clip(np.rint(table), 0, 255).astype(np.uint8)
    out.flags.writeable = False
    return out


def lookup_table(name: str, n: int = 256) -> np.ndarray:
    """(n, 3) uint8 colours from value 0 to value 1. Unknown name -> ValueError."""
    if n < 2:
        raise ValueError(f"a lookup table needs at least 2 entries, got {n}")
    return _table(name, int(n)).copy()


def apply_colormap(values: np.ndarray, name: str = "viridis", *, alpha: bool = False) -> np.ndarray:
    """Colour values in [0, 1] (clipped): (...) float -> (..., 3) uint8.

    NaN gives black; with ``alpha=True`` the result is (..., 4) with alpha 0 at NaN and 255
    elsewhere, so NaN can be drawn transparent.
    """
    table = _table(name, 256)
    v = np.asarray(values, dtype=np.float64)
    nan = np.isnan(v)
    idx = np.rint(np.clip(np.where(nan, 0.0, v), 0.0, 1.0) * 255).astype(np.intp)
    rgb = table[idx]
    rgb[nan] = 0
    if not alpha:
        return rgb
    a = np.where(nan, 0, 255).astype(np.uint8)[..., None]
    return np.concatenate([rgb, a], axis=-1)


NICE_STEPS = (1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0)


def nice_ceil(x: float) -> float:
    """The smallest m·10^k ≥ x with m in NICE_STEPS (at most 25 % above x); x > 0."""
    k = math.floor(math.log10(x))
    for m in NICE_STEPS:
        v = m * 10.0**k
        if v >= x * (1 - 1e-12):
            return v
    return 10.0 ** (k + 1)


def nice_levels(values: np.ndarray) -> tuple[float, float]:
    """Colour levels for a map: 0 to a round number above the maximum for non-negative maps
    (attention, rollout: the scale stays put while the map changes a little), else min..max."""
    finite = np.asarray(values)[np.isfinite(values)]
    if finite.size == 0:
        return 0.0, 1.0
    lo, hi = float(finite.min()), float(finite.max())
    if lo >= 0:
        return 0.0, nice_ceil(hi) if hi > 0 else 1.0
    return (lo, hi) if hi > lo else (lo, lo + 1e-6)


def scale_ticks(levels: tuple[float, float], max_ticks: int = 6) -> list[tuple[float, str]]:
    """(value, text) ticks of a colour bar over ``levels`` (lo, hi): both ends always, then round
    values between them (steps of 1, 2 or 5 × 10^k, at most ``max_ticks`` in all) that keep half
    a step clear of the ends. Texts as ``tick_text`` writes them (5.3e-05, 0.0123, 1234)."""
    lo, hi = float(levels[0]), float(levels[1])
    ends = [(lo, tick_text(lo))] if not hi > lo else [(lo, tick_text(lo)), (hi, tick_text(hi))]
    if not hi > lo or max_ticks <= 2:
        return ends
    span = hi - lo
    step = next(
        m * 10.0**e
        for e in range(math.floor(math.log10(span / (max_ticks - 1))), 400)
        for m in (1, 2, 5)
        if span / (m * 10.0**e) <= max_ticks - 1
    )
    inner = []
    k = math.ceil(lo / step)
    while (v := k * step) < hi:
        if v - lo >= step / 2 and hi - v >= step / 2:
            v = 0.0 if abs(v) < step * 1e-9 else v
            inner.append((v, tick_text(v)))
        k += 1
    return ends + inner


def tick_text(value: float) -> str:
    """A scale's number, short: 4 significant digits from 0.001 to 99999, else 2 with an
    exponent (5.3e-05)."""
    return f"{value:.4g}" if value == 0 or 1e-3 <= abs(value) < 1e5 else f"{value:.2g}"


def maps_levels(head_maps: np.ndarray, mean_maps: np.ndarray) -> tuple[float, float]:
    """One colour scale for every thumbnail of the head grid (0 to a round number for
    attention, so it stays put while the query moves). (L, H, h, w) and (L, h, w) maps."""
    ends = []
    for m in (head_maps, mean_maps):
        finite = m[np.isfinite(m)]  # a row a layer lacks (a CaiT's CLS in its SA layers): NaN
        if finite.size:
            ends += [float(finite.min()), float(finite.max())]
    return nice_levels(np.array(ends))
