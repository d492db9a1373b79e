"""A dot chart drawn with PIL: one value per (layer, head) by depth, one colour per series
(e.g. the mean attention distance of every head of two checkpoints, side by side)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from PIL import Image, ImageDraw

from vitviz.imaging.curves import _AXIS, _GRID, _SS, PALETTE, Colour, _font, _size, _text


@dataclass(frozen=True)
class DotSeries:
    """One series: ``values[layer][head]``, drawn as dots in ``colour``."""

    name: str
    values: Sequence[Sequence[float]]  # (L, H)
    colour: Colour


def nice_top(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 × 10^k at or above ``value`` (at least 1)."""
    if not math.isfinite(value) or value <= 1:
        return 1.0
    k = 10 ** math.floor(math.log10(value))
    return next(m * k for m in (1, 2, 2.5, 5, 10) if m * k >= value)


def dots_by_depth(
    series: Sequence[DotSeries],
    title: str,
    y_label: str,
    plot_size: tuple[int, int] = (560, 320),
) -> Image.Image:
    """Layers along x (0-based), the values along y from 0; each series' dots are shifted a
    little sideways so several series stand side by side in each layer. Returns RGB."""
    fonts = (_font(12), _font(13), _font(16))
    small, label, head = fonts
    layers = max((len(s.values) for s in series), default=1)
    finite = (v for s in series for row in s.values for v in row if math.isfinite(v))
    top_value = nice_top(max(finite, default=1.0))
    pw, ph = plot_size[0] * _SS, plot_size[1] * _SS
    left, top = 84 * _SS, 56 * _SS
    legend_h = 26 * _SS * max(1, len(series))
    width, height = left + pw + 24 * _SS, top + ph + 64 * _SS + legend_h
    canvas = Image.new("RGB", (width, height), (255, 255, 255))
    draw = ImageDraw.Draw(canvas)
    right, bottom = left + pw, top + ph
    _text(draw, (16 * _SS, 14 * _SS), title, head)
    for k in range(6):  # y grid and ticks
        v = top_value * k / 5
        y = bottom - ph * k / 5
        draw.line([(left, y), (right, y)], fill=_GRID, width=_SS)
        _text(draw, (left - 8 * _SS, y), f"{v:g}", small, "rm")
    step = pw / layers
    for layer in range(layers):  # x ticks at the layers' centres
        x = left + step * (layer + 0.5)
        draw.line([(x, bottom), (x, bottom + 5 * _SS)], fill=_AXIS, width=_SS)
        if layers <= 32 or layer % 2 == 0:
            _text(draw, (x, bottom + 8 * _SS), str(layer), small, "mt")
    draw.rectangle((left, top, right, bottom), outline=_AXIS, width=_SS)
    r = 3 * _SS
    n = max(1, len(series))
    for i, s in enumerate(series):
        shift = (i - (n - 1) / 2) * min(step / (n + 1), 10 * _SS)
        for layer, row in enumerate(s.values):
            x = left + step * (layer + 0.5) + shift
            for v in row:
                if not math.isfinite(v):
                    continue
                y = bottom - ph * max(0.0, min(1.0, v / top_value))
                draw.ellipse((x - r, y - r, x + r, y + r), fill=s.colour)
    _, tick_h = _size(draw, "0", small)
    _text(draw, ((left + right) / 2, bottom + 14 * _SS + tick_h), "layer", label, "mt")
    strip = Image.new("RGBA", (_size(draw, y_label, label)[0] + 4 * _SS, 24 * _SS), (0,) * 4)
    _text(ImageDraw.Draw(strip), (2 * _SS, 2 * _SS), y_label, label, "lt")
    turned = strip.rotate(90, expand=True)
    canvas.paste(turned, (8 * _SS, int((top + bottom - turned.height) / 2)), turned)
    y = bottom + 44 * _SS + tick_h
    for s in series:  # the legend: a dot and the series' name
        draw.ellipse((left, y - r, left + 2 * r, y + r), fill=s.colour)
        _text(draw, (left + 4 * r, y), s.name, label, "lm")
        y += 26 * _SS
    return canvas.resize((width // _SS, height // _SS), Image.Resampling.LANCZOS)


def palette_colour(i: int) -> Colour:
    return PALETTE[i % len(PALETTE)]
