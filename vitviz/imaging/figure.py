"""A map overlay as a figure: title lines above it and a colour bar with its scale beside it,
drawn with PIL. The overlay's own pixels are pasted unchanged (at ``figure_box``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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
) -> Image.Image:
    """``overlay`` with ``lines`` above it (the first as the title, the rest smaller) and on its
    right a colour bar of ``colormap`` labelled from ``levels`` (lo, hi), the values the
    overlay's colours stand for. lo == hi (a flat map): the bar is one colour, labelled once."""
    return _draw(overlay, lines, levels, colormap)[0]


def figure_layout(
    overlay: Image.Image, lines: Sequence[str], levels: tuple[float, float]
) -> FigureLayout:
    """The layout ``titled_figure`` uses for these inputs (for tests and callers that crop)."""
    return _draw(overlay, lines, levels, "grey")[1]


def _draw(
    overlay: Image.Image, lines: Sequence[str], levels: tuple[float, float], colormap: str
) -> tuple[Image.Image, FigureLayout]:
    w, h = overlay.size
    size = font_size(overlay.size)
    title_font, line_font = _font(size), _font(max(10, round(size * 0.8)))
    pad = max(6, size // 2)
    probe = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    fonts = [title_font] + [line_font] * (len(lines) - 1)
    line_h = [round(f.size * 1.35) if hasattr(f, "size") else 14 for f in fonts]
    text_w = max((_text_width(probe, t, f) for t, f in zip(lines, fonts, strict=True)), default=0)

    lo, hi = float(levels[0]), float(levels[1])
    flat = not hi > lo
    ticks = [(0.5, f"{lo:.3g} (flat)")] if flat else scale_labels((lo, hi))
    label_w = max(_text_width(probe, t, line_font) for _, t in ticks)
    bar_w = max(10, size)
    top = pad + sum(line_h) + pad
    bar_left = pad + w + pad
    width = max(bar_left + bar_w + pad // 2 + 4 + label_w + pad, pad + text_w + pad)
    height = top + h + pad + line_h[-1] // 2

    canvas = Image.new("RGB", (width, height), (255, 255, 255))
    draw = ImageDraw.Draw(canvas)
    y = pad
    for text, font, lh in zip(lines, fonts, line_h, strict=True):
        draw.text((pad, y), text, fill=_INK if font is title_font else _SUBTLE, font=font)
        y += lh
    canvas.paste(overlay.convert("RGB"), (pad, top))

    bar = (bar_left, top, bar_left + bar_w, top + h)
    values = np.zeros(h) if flat else np.linspace(1.0, 0.0, h)
    colours = apply_colormap(values, colormap)  # (h, 3)
    strip = np.broadcast_to(colours[:, None, :], (h, bar_w, 3)).astype(np.uint8)
    canvas.paste(Image.fromarray(np.ascontiguousarray(strip)), (bar_left, top))
    draw.rectangle((bar[0] - 1, bar[1] - 1, bar[2], bar[3]), outline=_FRAME)
    for t, text in ticks:
        ty = top + round((1.0 - t) * (h - 1))
        draw.line((bar[2], ty, bar[2] + pad // 2, ty), fill=_FRAME)
        _, t_top, _, t_bottom = draw.textbbox((0, 0), text, font=line_font)
        x = bar[2] + pad // 2 + 4
        draw.text((x, ty - (t_top + t_bottom) // 2), text, fill=_INK, font=line_font)
    return canvas, FigureLayout((pad, top), bar, (width, height))
