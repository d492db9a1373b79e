"""A map overlay as a figure: title lines above it and a colour bar with its scale beside it,
drawn with PIL. The overlay's own pixels are pasted unchanged (see ``figure_layout``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from vitviz.imaging.colormaps import apply_colormap

_INK, _SUBTLE, _FRAME = (20, 20, 20), (90, 90, 90), (120, 120, 120)
BASE_FONT = 14  # pixels, for overlays up to REFERENCE_SIDE on their long side
REFERENCE_SIDE = 600
MAX_FONT = 56


@dataclass(frozen=True)
class FigureLayout:
    """Where the parts of a figure lie (pixels): the overlay's top-left corner, the bar's box."""

    overlay_at: tuple[int, int]
    bar: tuple[int, int, int, int]  # left, top, right, bottom
    size: tuple[int, int]  # (width, height) of the figure


def _font(size: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    try:
        return ImageFont.load_default(size=size)
    except (TypeError, ValueError, OSError):  # a Pillow without FreeType: the bitmap font
        return ImageFont.load_default()


def _text_width(draw: ImageDraw.ImageDraw, text: str, font) -> int:
    left, _, right, _ = draw.textbbox((0, 0), text, font=font)
    return int(right - left)


def font_size(overlay_size: tuple[int, int]) -> int:
    """Title font size for an overlay of (width, height): larger for large overlays."""
    long_side = max(overlay_size)
    return min(MAX_FONT, round(BASE_FONT * max(1.0, long_side / REFERENCE_SIDE)))


def scale_labels(levels: tuple[float, float]) -> list[tuple[float, str]]:
    """(position 0 = bottom .. 1 = top, text) of the colour bar's ticks: low, middle, high."""
    lo, hi = levels
    return [(t, f"{lo + t * (hi - lo):.3g}") for t in (0.0, 0.5, 1.0)]


def titled_figure(
    overlay: Image.Image,
    lines: Sequence[str],
    levels: tuple[float, float],
    colormap: str = "viridis",
    ticks: Sequence[tuple[float, str]] | None = None,
) -> Image.Image:
    """``overlay`` with ``lines`` above it (the first as the title, the rest smaller) and on its
    right a colour bar of ``colormap`` labelled from ``levels`` (lo, hi), the values the
    overlay's colours stand for. lo == hi (a flat map): the bar is one colour, labelled once.
    ``ticks``: (position 0 = bottom .. 1 = top, text) labels instead of the levels' numbers."""
    plan = _plan(overlay.size, lines, levels, ticks)
    h = overlay.height
    canvas = Image.new("RGB", plan.layout.size, (255, 255, 255))
    draw = ImageDraw.Draw(canvas)
    y = plan.pad
    for i, (text, lh) in enumerate(zip(lines, plan.line_heights, strict=True)):
        font = plan.title_font if i == 0 else plan.line_font
        draw.text((plan.pad, y), text, fill=_INK if i == 0 else _SUBTLE, font=font)
        y += lh
    canvas.paste(overlay.convert("RGB"), plan.layout.overlay_at)

    left, top, right, bottom = plan.layout.bar
    values = np.zeros(h) if plan.flat else np.linspace(1.0, 0.0, h)  # top row: the high end
    colours = apply_colormap(values, colormap)  # (h, 3)
    strip = np.broadcast_to(colours[:, None, :], (h, right - left, 3))
    canvas.paste(Image.fromarray(np.ascontiguousarray(strip)), (left, top))
    draw.rectangle((left - 1, top - 1, right, bottom), outline=_FRAME)
    tick = plan.pad // 2
    for t, text in plan.ticks:
        ty = top + round((1.0 - t) * (h - 1))
        draw.line((right, ty, right + tick, ty), fill=_FRAME)
        _, t_top, _, t_bottom = draw.textbbox((0, 0), text, font=plan.line_font)
        draw.text(
            (right + tick + 4, ty - (t_top + t_bottom) // 2), text, fill=_INK, font=plan.line_font
        )
    return canvas


def figure_layout(
    overlay_size: tuple[int, int],
    lines: Sequence[str],
    levels: tuple[float, float],
    ticks: Sequence[tuple[float, str]] | None = None,
) -> FigureLayout:
    """Where ``titled_figure`` puts an overlay of (width, height) and its bar, and its size."""
    return _plan(overlay_size, lines, levels, ticks).layout


@dataclass(frozen=True)
class _Plan:
    layout: FigureLayout
    title_font: Any
    line_font: Any
    line_heights: list[int]
    pad: int
    flat: bool
    ticks: list[tuple[float, str]]


def _plan(
    overlay_size: tuple[int, int],
    lines: Sequence[str],
    levels: tuple[float, float],
    given_ticks: Sequence[tuple[float, str]] | None = None,
) -> _Plan:
    w, h = overlay_size
    size = font_size(overlay_size)
    title_font, line_font = _font(size), _font(max(10, round(size * 0.8)))
    pad = max(6, size // 2)
    probe = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    fonts = [title_font if i == 0 else line_font for i in range(len(lines))]
    heights = [round(getattr(f, "size", 11) * 1.35) for f in fonts]
    text_w = max((_text_width(probe, t, f) for t, f in zip(lines, fonts, strict=True)), default=0)

    lo, hi = float(levels[0]), float(levels[1])
    flat = not hi > lo
    ticks = [(0.5, f"{lo:.3g} (flat)")] if flat else scale_labels((lo, hi))
    if given_ticks is not None:
        flat, ticks = False, list(given_ticks)
    label_w = max(_text_width(probe, t, line_font) for _, t in ticks)
    bar_w = max(10, size)
    top = pad + sum(heights) + pad
    bar_left = pad + w + pad
    width = max(bar_left + bar_w + pad // 2 + 4 + label_w + pad, pad + text_w + pad)
    height = top + h + pad + size // 2  # room for the lowest tick label's lower half
    bar = (bar_left, top, bar_left + bar_w, top + h)
    layout = FigureLayout((pad, top), bar, (width, height))
    return _Plan(layout, title_font, line_font, heights, pad, flat, ticks)
