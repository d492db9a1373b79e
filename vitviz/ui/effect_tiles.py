"""What the head grid draws over its tiles for the knock-out controls (DESIGN §5,
"Interventions"): ``KnockoutOverlay`` greys knocked-out tiles with a cross and, in the head
importance and patching views, paints each head's tile with its effect on a diverging colour
map (the mean column, which has no effect, and the heads not measured yet flat); the
``ImportanceScale`` says that map's range, unit and class above the grid."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QLineF, QRectF, Qt
from PySide6.QtGui import QBrush, QColor, QImage, QPen, QPixmap
from PySide6.QtWidgets import QGraphicsLineItem, QGraphicsRectItem, QHBoxLayout, QLabel, QWidget

from vitviz.imaging.colormaps import tick_text
from vitviz.imaging.effect_grid import diverging_colours, symmetric_levels
from vitviz.ui.head_grid import MEAN, HeadGrid

KNOCKED_FILL = QColor(40, 40, 40, 215)
CROSS_COLOR = QColor(255, 140, 60)
NO_EFFECT_FILL = QColor(52, 52, 52)  # a tile without an effect in an effect view: no colour
IMPORTANCE_ALPHA = 255  # opaque: each tile the bar's colour of its value, untinted
EFFECT_Z, BLANK_Z, KNOCKED_Z = 20, 19, 20  # over the thumbnails (10), under the selection (30)
PATCH_UNIT = "of the logit gap"  # a patching effect's unit: a share of y(clean) − y(shown)
NO_MEAN_EFFECT = "no effect: each head is measured alone"  # the mean column's hover
SCALE_IMPORTANCE_TIP = (
    "Each head's effect on the shown class: its logit with every head minus its logit with that "
    "head knocked out alone (red: the head helps the class, blue: it hurts)"
)
SCALE_PATCHING_TIP = (
    "Each head's patching effect: the shown image's pass with that head's output taken from the "
    "clean image's pass, (y(patched) − y(shown)) / (y(clean) − y(shown)) for the clean image's "
    "top class (1: the head alone carries the difference, 0: it carries none)"
)


class KnockoutOverlay:
    """Rectangles and crosses over a HeadGrid's tiles (in its view coordinates): knocked-out
    heads greyed with a cross; in an effect view (``blank``) every tile flat but the heads'
    with an effect, each in its colour on the diverging map of ``levels``."""

    def __init__(self, grid: HeadGrid) -> None:
        self.grid = grid
        self.knocked: set[tuple[int, int]] = set()
        self.effect: np.ndarray | None = None  # (L, H) shown as colours, or None
        self.blank = False  # an effect view: no tile without an effect keeps a colour
        self.levels = (-1.0, 1.0)
        self._items: list = []

    def show(
        self, knocked: set[tuple[int, int]], effect: np.ndarray | None, blank: bool = False
    ) -> None:
        """Draw ``knocked`` and ``effect`` (L, H) (None: no effects, measured or not yet)."""
        self.knocked, self.effect, self.blank = set(knocked), effect, blank
        if effect is not None:
            self.levels = symmetric_levels(effect)
        self.redraw()

    def redraw(self) -> None:
        vb = self.grid.vb
        for item in self._items:
            vb.removeItem(item)
        self._items = []
        L, H = self.grid.shape
        gh, gw = self.grid.layout.tile
        effect = self.effect if self.effect is not None and self.effect.shape[0] == L else None
        if self.blank:  # the mean column, and the heads without an effect (yet)
            for layer, heads in enumerate(self.grid.row_heads()):
                for head in range(-1, min(heads, H)):
                    if head == MEAN or self.value(layer, head) is None:
                        self._rect(layer, head, NO_EFFECT_FILL, gh, gw, BLANK_Z)
        if effect is not None:
            colours = diverging_colours(effect, self.levels)
            for layer, head in zip(*np.nonzero(np.isfinite(effect)), strict=True):
                if head >= H:
                    continue
                r, g, b = (int(c) for c in colours[layer, head])
                colour = QColor(r, g, b, IMPORTANCE_ALPHA)
                self._rect(int(layer), int(head), colour, gh, gw, EFFECT_Z)
        for layer, head in self.knocked:
            if layer >= L or head >= H:
                continue
            x, y = self._rect(layer, head, KNOCKED_FILL, gh, gw, KNOCKED_Z)
            pen = QPen(CROSS_COLOR)
            pen.setCosmetic(True)
            pen.setWidthF(2.0)
            m = 0.2
            for line in (
                QLineF(x + m * gw, y + m * gh, x + (1 - m) * gw, y + (1 - m) * gh),
                QLineF(x + (1 - m) * gw, y + m * gh, x + m * gw, y + (1 - m) * gh),
            ):
                item = QGraphicsLineItem(line)
                item.setPen(pen)
                item.setZValue(KNOCKED_Z + 2)
                vb.addItem(item)
                self._items.append(item)

    def _rect(
        self, layer: int, head: int, colour: QColor, gh: int, gw: int, z: float
    ) -> tuple[int, int]:
        """A ``colour`` rectangle over (layer, head)'s tile (MEAN: the mean column's)."""
        x, y = self.grid.layout.origin(layer, head + 1)
        item = QGraphicsRectItem(QRectF(x, y, gw, gh))
        item.setBrush(QBrush(colour))
        item.setPen(QPen(Qt.PenStyle.NoPen))
        item.setZValue(z)
        self.grid.vb.addItem(item)
        self._items.append(item)
        return x, y

    def value(self, layer: int, head: int) -> float | None:
        if self.effect is None or head == MEAN or layer >= self.effect.shape[0]:
            return None
        if head >= self.effect.shape[1] or not np.isfinite(self.effect[layer, head]):
            return None
        return float(self.effect[layer, head])


class ImportanceScale(QWidget):
    """The importance (or patching) view's colour scale above the grid: 'Importance: −m
    [diverging bar] +m logits (class)', or 'Patched from clean.png: −m [bar] +m of the logit
    gap (class)'; the title says "(intervened model)" for effects measured with heads knocked
    out (its tooltip says which), and "measuring…" without a bar while they are measured."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.lo, self.bar, self.hi = QLabel(), QLabel(), QLabel()
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 8, 0)
        layout.setSpacing(3)
        self.title = QLabel("Importance:")
        layout.addWidget(self.title)
        for w in (self.lo, self.bar, self.hi):
            layout.addWidget(w)
        values = np.linspace(-1.0, 1.0, 96)[None].repeat(10, 0)
        rgb = np.ascontiguousarray(diverging_colours(values, (-1.0, 1.0)))
        image = QImage(rgb.data, 96, 10, 96 * 3, QImage.Format.Format_RGB888).copy()
        self.bar.setPixmap(QPixmap.fromImage(image))
        self.setToolTip(SCALE_IMPORTANCE_TIP)

    def show_effects(
        self,
        name: str,
        tip: str,
        levels: tuple[float, float],
        class_name: str,
        unit: str,
        knocked: str = "",
    ) -> None:
        """Effects on ``levels`` for ``class_name`` in ``unit``, the view called ``name``
        ("Importance"); ``knocked``: the heads knocked out of the model they were measured
        on, in words ("" for the model as it is)."""
        self.title.setText(f"{name} (intervened model):" if knocked else f"{name}:")
        self.lo.setText(tick_text(levels[0]))
        self.hi.setText(f"+{tick_text(levels[1])} {unit} ({class_name})")
        for w in (self.lo, self.bar, self.hi):
            w.show()
        self.setToolTip(f"{tip}. Measured on the model with {knocked}." if knocked else tip)

    def show_measuring(self, name: str, knocked: str = "") -> None:
        """The view ``name`` waiting for its effects (on the model with ``knocked``)."""
        self.title.setText(f"{name}: measuring…")
        for w in (self.lo, self.bar, self.hi):
            w.hide()
        on = f" on the model with {knocked}" if knocked else ""
        self.setToolTip(f"Each head's effect is being measured{on}; the tiles wait for it")
