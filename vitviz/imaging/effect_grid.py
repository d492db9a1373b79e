"""A layer × head grid of signed numbers (head effects, patching effects) as a picture: one cell
per head on a diverging colour map centred on 0, its value written in it, rows labelled with
the layers, a colour bar with its scale (``titled_figure``). NaN (a head its layer lacks) is a
blank cell."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from PIL import Image, ImageDraw

from vitviz.imaging.colormaps import apply_colormap, nice_ceil, tick_text
from vitviz.imaging.figure import _font, titled_figure

DIVERGING = "coolwarm"
_BLANK, _LINE, _INK = (248, 248, 248), (200, 200, 200), (20, 20, 20)


def symmetric_levels(values: np.ndarray) -> tuple[float, float]:
    """(−m, m) with m a round number at or above the largest |value| (1 for all zero / NaN)."""
    finite = np.abs(values[np.isfinite(values)])
    top = float(finite.max()) if finite.size else 0.0
    m = nice_ceil(top) if top > 0 else 1.0
    return -m, m


def diverging_colours(values: np.ndarray, levels: tuple[float, float]) -> np.ndarray:
    """(..., 3) uint8 colours of ``values`` on the diverging map over ``levels``; NaN blank."""
    lo, hi = levels
    t = np.clip((np.nan_to_num(values) - lo) / (hi - lo), 0.0, 1.0)
    rgb = apply_colormap(t, DIVERGING)[..., :3]
    rgb[~np.isfinite(values)] = _BLANK
    return rgb


def effect_grid_picture(
    values: np.ndarray,
    lines: Sequence[str],
    row_labels: Sequence[str] | None = None,
    cell: int = 56,
) -> Image.Image:
    """``values`` (L, H) as a titled grid picture (``lines``: title, then smaller lines)."""
    values = np.asarray(values, dtype=np.float64)
    L, H = values.shape
    labels = list(row_labels) if row_labels is not None else [str(i) for i in range(L)]
    font = _font(max(10, cell // 4))
    probe = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    left = 8 + max(int(probe.textlength(t, font=font)) for t in [*labels, "layer"])
    top = cell // 2 + 4
    grid = Image.new("RGB", (left + H * cell + 1, top + L * cell + 1), (255, 255, 255))
    draw = ImageDraw.Draw(grid)
    levels = symmetric_levels(values)
    colours = diverging_colours(values, levels)
    for h in range(H):
        draw.text((left + h * cell + cell // 2, top // 2), str(h), fill=_INK, font=font,
                  anchor="mm")  # fmt: skip
    for i in range(L):
        y = top + i * cell
        draw.text((left - 6, y + cell // 2), labels[i], fill=_INK, font=font, anchor="rm")
        for h in range(H):
            x = left + h * cell
            colour = tuple(int(c) for c in colours[i, h])
            draw.rectangle((x, y, x + cell, y + cell), fill=colour, outline=_LINE)
            if np.isfinite(values[i, h]) and cell >= 30:
                dark = sum(colour) < 330
                ink = (255, 255, 255) if dark else _INK
                text = tick_text(round(float(values[i, h]), 3))
                draw.text((x + cell // 2, y + cell // 2), text, fill=ink, font=font, anchor="mm")
    return titled_figure(grid, lines, levels, DIVERGING)
