"""Line charts drawn with PIL (no plotting library): panels of curves over [0, 1] × [0, 1] with
axes, ticks, grid lines and one shared legend table (e.g. the faithfulness curves and AUCs)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

from PIL import Image, ImageDraw, ImageFont

Colour = tuple[int, int, int]
# Distinct, colour-blind-friendly hues (Tableau 10 without its grey, kept for the baseline).
PALETTE: tuple[Colour, ...] = (
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (188, 189, 34),
    (23, 190, 207),
)
GREY: Colour = (120, 120, 120)
_SS = 2  # drawn at twice the size, then reduced: smooth lines and text

_TICKS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
_INK, _AXIS, _GRID = (30, 30, 30), (90, 90, 90), (225, 225, 225)


@dataclass(frozen=True)
class Curve:
    """One line: y values at evenly spaced x over [0, 1] (the first at 0, the last at 1)."""

    values: Sequence[float]
    colour: Colour
    dashed: bool = False


@dataclass(frozen=True)
class Panel:
    title: str
    x_label: str
    y_label: str
    curves: Sequence[Curve] = field(default_factory=tuple)


@dataclass(frozen=True)
class LegendRow:
    colour: Colour
    cells: Sequence[str]  # one text per legend column
    dashed: bool = False


def _font(size: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    try:
        return ImageFont.load_default(size=size * _SS)
    except (TypeError, ValueError, OSError):  # a Pillow without FreeType: the bitmap font
        return ImageFont.load_default()


def _size(draw: ImageDraw.ImageDraw, text: str, font) -> tuple[int, int]:
    left, top, right, bottom = draw.textbbox((0, 0), text, font=font)
    return int(right - left), int(bottom - top)


def _text(draw, xy, text, font, anchor="la", fill=_INK) -> None:
    draw.text(xy, text, fill=fill, font=font, anchor=anchor)


def _line(draw, points, colour: Colour, width: int, dashed: bool) -> None:
    """A polyline; dashed: on/off runs of 7/5 (scaled) pixels along its length."""
    if not dashed:
        draw.line(points, fill=colour, width=width, joint="curve")
        return
    on, off = 7 * _SS * 1.4, 5 * _SS
    drawing, left = True, on
    for (x0, y0), (x1, y1) in itertools.pairwise(points):
        length = ((x1 - x0) ** 2 + (y1 - y0) ** 2) ** 0.5
        start = 0.0
        while start < length:
            run = min(left, length - start)
            if drawing:
                a, b = start / length, (start + run) / length
                draw.line(
                    [
                        (x0 + (x1 - x0) * a, y0 + (y1 - y0) * a),
                        (x0 + (x1 - x0) * b, y0 + (y1 - y0) * b),
                    ],
                    fill=colour,
                    width=width,
                )
            start += run
            left -= run
            if left <= 0:
                drawing = not drawing
                left = on if drawing else off


def _panel(canvas: Image.Image, box: tuple[int, int, int, int], panel: Panel, fonts) -> None:
    """Axes, grid, ticks, labels and the curves of one panel; ``box`` is the plot area."""
    small, label, title = fonts
    draw = ImageDraw.Draw(canvas)
    left, top, right, bottom = box
    w, h = right - left, bottom - top

    def at(x: float, y: float) -> tuple[float, float]:
        return left + x * w, bottom - max(0.0, min(1.0, y)) * h

    for t in _TICKS:
        x, y = at(t, t)
        draw.line([(x, top), (x, bottom)], fill=_GRID, width=_SS)
        draw.line([(left, y), (right, y)], fill=_GRID, width=_SS)
        draw.line([(x, bottom), (x, bottom + 5 * _SS)], fill=_AXIS, width=_SS)
        draw.line([(left - 5 * _SS, y), (left, y)], fill=_AXIS, width=_SS)
        _text(draw, (x, bottom + 8 * _SS), f"{t:.1f}", small, "mt")
        _text(draw, (left - 8 * _SS, y), f"{t:.1f}", small, "rm")
    draw.rectangle(box, outline=_AXIS, width=_SS)
    for curve in panel.curves:
        n = len(curve.values)
        if n < 2:
            continue
        points = [at(k / (n - 1), float(v)) for k, v in enumerate(curve.values)]
        _line(draw, points, curve.colour, 2 * _SS + _SS // 2, curve.dashed)
    _text(draw, ((left + right) / 2, top - 10 * _SS), panel.title, title, "md")
    _, tick_h = _size(draw, "0.0", small)
    _text(draw, ((left + right) / 2, bottom + 16 * _SS + tick_h), panel.x_label, label, "mt")
    # the y label, turned a quarter
    lw, lh = _size(draw, panel.y_label, label)
    strip = Image.new("RGBA", (lw + 4 * _SS, lh + 8 * _SS), (255, 255, 255, 0))
    _text(ImageDraw.Draw(strip), (2 * _SS, 2 * _SS), panel.y_label, label, "lt")
    turned = strip.rotate(90, expand=True)
    tick_w, _ = _size(draw, "0.0", small)
    x = int(left - 14 * _SS - tick_w - turned.width)
    y = int((top + bottom) / 2 - turned.height / 2)
    canvas.paste(turned, (x, y), turned)


def curves_figure(
    panels: Sequence[Panel],
    legend_header: Sequence[str],
    legend: Sequence[LegendRow],
    title: str,
    subtitle: str = "",
    plot_size: tuple[int, int] = (380, 300),
) -> Image.Image:
    """Panels side by side, each ``plot_size`` (w, h) pixels of plot area over x, y in [0, 1],
    and on their right a legend table: a line sample in each row's colour, then its cells
    (``legend_header`` above). Returns an RGB image."""
    fonts = (_font(12), _font(13), _font(15))
    head_font, sub_font = _font(17), _font(12)
    probe = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    pw, ph = plot_size[0] * _SS, plot_size[1] * _SS
    pad = 16 * _SS
    margin_left, margin_right = 78 * _SS, 18 * _SS
    top = 60 * _SS + (30 * _SS if subtitle else 0)
    margin_bottom = 62 * _SS

    # legend table geometry
    cells = [list(legend_header)] + [list(r.cells) for r in legend]
    columns = max((len(c) for c in cells), default=0)
    widths = [
        max(_size(probe, row[i], fonts[1])[0] for row in cells if i < len(row))
        for i in range(columns)
    ]
    sample_w, gap = 30 * _SS, 14 * _SS
    row_h = int(_size(probe, "Ag", fonts[1])[1] * 1.9)
    legend_w = sample_w + gap + sum(widths) + gap * max(columns - 1, 0) + 2 * pad

    panels_w = len(panels) * (margin_left + pw + margin_right)
    width = panels_w + legend_w + pad
    legend_h = row_h * (len(legend) + 1) + 2 * pad
    height = max(top + ph + margin_bottom, top + legend_h)
    canvas = Image.new("RGB", (width, height), (255, 255, 255))
    draw = ImageDraw.Draw(canvas)
    _text(draw, (pad, 14 * _SS), title, head_font)
    if subtitle:
        _text(
            draw,
            (pad, 14 * _SS + _size(draw, title, head_font)[1] + 10 * _SS),
            subtitle,
            sub_font,
            fill=_AXIS,
        )

    for i, panel in enumerate(panels):
        left = i * (margin_left + pw + margin_right) + margin_left
        _panel(canvas, (left, top, left + pw, top + ph), panel, fonts)

    # the legend
    x0, y = panels_w + pad, top
    draw.rectangle(
        (x0 - pad // 2, y - pad // 2, width - pad // 2, y + legend_h - pad),
        outline=_GRID,
        width=_SS,
    )
    y += pad // 2
    rows = [(None, list(legend_header), False)] + [
        (r.colour, list(r.cells), r.dashed) for r in legend
    ]
    for colour, texts, dashed in rows:
        mid = y + row_h / 2
        if colour is not None:
            _line(draw, [(x0, mid), (x0 + sample_w, mid)], colour, 3 * _SS, dashed)
        x = x0 + sample_w + gap
        for i, text in enumerate(texts):
            font = fonts[1]
            if i == 0:
                _text(draw, (x, mid), text, font, "lm")
            else:  # numbers: right-aligned in their column
                _text(draw, (x + widths[i], mid), text, font, "rm")
            x += widths[i] + gap
        if colour is None:
            draw.line([(x0, y + row_h), (x - gap, y + row_h)], fill=_AXIS, width=_SS)
        y += row_h
    return canvas.resize((width // _SS, height // _SS), Image.Resampling.LANCZOS)
