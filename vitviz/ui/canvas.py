"""ImageCanvas: an image at its true aspect ratio with a patch map, the patch grid and the query."""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QBrush, QColor, QFontMetrics, QPainterPath, QPalette, QPen
from PySide6.QtWidgets import QGraphicsPathItem, QGraphicsRectItem, QLabel

from vitviz.imaging.colormaps import nice_levels
from vitviz.ui.colors import colormap, make_colorbar, set_colorbar_levels
from vitviz.ui.image_item import ImageItem

TITLE_HEIGHT = 20
NOTICE_SHARE = 0.3  # of the view's height, at most, the notes over the map take
BACKGROUND = "#202020"
FLAT_TOLERANCE = 1e-6  # a map whose values spread less than this (relative) says it is flat


def flat_value(values: np.ndarray) -> float | None:
    """The one value of a map that is the same everywhere (within FLAT_TOLERANCE), else None;
    NaN when it has no finite value at all."""
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return float("nan")
    lo, hi = float(finite.min()), float(finite.max())
    return lo if hi - lo <= FLAT_TOLERANCE * max(abs(hi), abs(lo), 1e-30) else None


def _pen(color: QColor, width: float) -> QPen:
    pen = QPen(color)
    pen.setCosmetic(True)
    pen.setWidthF(width)
    return pen


def _segments_path(segments: np.ndarray | None) -> QPainterPath:
    path = QPainterPath()
    for x0, y0, x1, y1 in [] if segments is None else segments.tolist():
        path.moveTo(x0, y0)
        path.lineTo(x1, y1)
    return path


class GridLines(QGraphicsPathItem):
    """The patch grid: thin translucent lines of one device pixel at any zoom.

    Clipped to its own bounds before stroking: without a clip, Qt's raster engine strokes a
    translucent cosmetic pen some 50× slower (4 ms instead of 0.08 ms for a 14 × 14 grid).
    """

    def __init__(self, fade: bool = False) -> None:
        super().__init__()
        pen = QPen(QColor(255, 255, 255, 70))
        pen.setCosmetic(True)
        pen.setWidthF(1.0)
        self.setPen(pen)
        self.fade = fade  # the lines fade as the cells get small on screen (``cell``)
        self.cell = 0.0  # the smallest cell side, in the item's units (image pixels)

    def paint(self, painter, option, widget=None) -> None:
        painter.setClipRect(self.boundingRect(), Qt.ClipOperation.IntersectClip)
        if not self.fade or self.cell <= 0:
            super().paint(painter, option, widget)
            return
        alpha = grid_alpha(self.cell * painter.worldTransform().m11())
        if alpha > 0:  # the pen of this paint only: no setPen, which would paint again
            pen = QPen(self.pen())
            color = pen.color()
            color.setAlpha(alpha)
            pen.setColor(color)
            painter.setPen(pen)
            painter.drawPath(self.path())


GRID_ALPHA = 70  # the grid lines' opacity (of 255) over cells FULL_CELL_PX or more across
FULL_CELL_PX, NO_CELL_PX = 16.0, 4.0  # between, the lines fade; below, none


def grid_alpha(cell_px: float) -> int:
    """The grid lines' alpha for cells ``cell_px`` screen pixels across: GRID_ALPHA for large
    cells, fading to none as they shrink to NO_CELL_PX (a 56 × 56 grid doesn't hide its image)."""
    share = (abs(cell_px) - NO_CELL_PX) / (FULL_CELL_PX - NO_CELL_PX)
    return round(GRID_ALPHA * min(1.0, max(0.0, share)))


def fitted_title(text: str, fm: QFontMetrics, width: int) -> str:
    """``text`` as it fits ``width`` pixels in ``fm``'s font: whole, else without its last
    " · " parts (a title's least important) ending in " …", else cut at its end with "…"."""
    if fm.horizontalAdvance(text) <= width:
        return text
    parts = text.split(" · ")
    while len(parts) > 1:
        parts.pop()
        shorter = " · ".join(parts) + " …"
        if fm.horizontalAdvance(shorter) <= width:
            return shorter
    return fm.elidedText(text, Qt.TextElideMode.ElideRight, max(0, width))


class ImageCanvas(pg.GraphicsLayoutWidget):
    """Shows an RGB image with a (gh, gw) map stretched over ``region`` (l, t, r, b).

    Hover reports (row, col, value); a click on a patch emits ``patchClicked(row, col)``.
    """

    patchHovered = Signal(object)  # (row, col, value) or None when outside the grid
    patchClicked = Signal(int, int)

    def __init__(self, title: str = "", colorbar: bool = True, parent=None) -> None:
        super().__init__(parent=parent)
        self.setAcceptDrops(False)  # drops go to the main window, which recognises the kind
        self.setBackground(BACKGROUND)
        self.ci.layout.setContentsMargins(2, 2, 2, 2)
        # The title is a plain QLabel over a fixed strip of the layout: new text repaints the
        # label only, it never re-lays out the scene (a pyqtgraph LabelItem would).
        self.addLabel("", row=0, col=0, colspan=2).setFixedHeight(TITLE_HEIGHT)
        self.title = QLabel(title, self)
        self.full_title = title  # the title's whole text (the label may show it shortened)
        self.title.setAlignment(Qt.AlignmentFlag.AlignCenter)
        # Opaque, filled with the canvas's background: new text repaints the label alone, not
        # the scene beneath it (a transparent label costs the view a second paint per change)
        palette = self.title.palette()
        palette.setColor(QPalette.ColorRole.Window, QColor(BACKGROUND))
        palette.setColor(QPalette.ColorRole.WindowText, QColor("#dddddd"))
        self.title.setPalette(palette)
        self.title.setAutoFillBackground(True)
        self.title.setGeometry(0, 2, self.width(), TITLE_HEIGHT)
        # "this map is flat": said in the view, where a colour bar would suggest a meaning
        self.notice = QLabel(self)
        self.notice.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.notice.setWordWrap(True)
        self.notice.setStyleSheet(
            "background: rgba(20, 20, 20, 210); color: #ffd479; padding: 8px; border-radius: 4px;"
        )
        self.notice.hide()
        self._flat_text = ""  # the notice's words about a flat map …
        self._view_text = ""  # … and the viewer's (a method shown instead, a scale's range)
        self._view_details = ""  # … those in full (the notice's tooltip)
        self._notice_text = self._notice_full = ""  # the notes over the map; in full
        self.vb: pg.ViewBox = self.addViewBox(
            row=1, col=0, lockAspect=True, invertY=True, enableMenu=False
        )
        self.image = ImageItem(axisOrder="row-major")
        self.overlay = ImageItem(axisOrder="row-major")
        self.overlay.setZValue(10)
        self.overlay.hide()  # until a map is set
        self.vb.addItem(self.image)
        self.vb.addItem(self.overlay)
        self.rgb_overlay = ImageItem(axisOrder="row-major")  # a map of colours (the PCA's)
        self.rgb_overlay.setZValue(10)
        self.rgb_overlay.hide()
        self.vb.addItem(self.rgb_overlay)
        self.dim = QGraphicsPathItem()
        self.dim.setBrush(QBrush(QColor(0, 0, 0, 150)))
        self.dim.setPen(QPen(Qt.PenStyle.NoPen))
        self.dim.setZValue(15)
        self.vb.addItem(self.dim)
        self.grid_lines = GridLines(fade=True)
        self.grid_lines.setZValue(20)
        self.vb.addItem(self.grid_lines)
        self.window_lines = GridLines()  # a layer's window partition (a Swin block's)
        self.window_lines.setPen(_pen(QColor(255, 214, 90, 200), 1.5))
        self.window_lines.setZValue(22)
        self.vb.addItem(self.window_lines)
        self.query_window = GridLines()  # the query's window
        self.query_window.setPen(_pen(QColor(255, 255, 255), 3.0))
        self.query_window.setZValue(25)
        self.vb.addItem(self.query_window)
        self.query_box = QGraphicsRectItem()
        pen = QPen(QColor(255, 60, 60))
        pen.setCosmetic(True)
        pen.setWidthF(2.0)
        self.query_box.setPen(pen)
        self.query_box.setZValue(30)
        self.query_box.hide()
        self.vb.addItem(self.query_box)
        self.colorbar: pg.ColorBarItem | None = None
        if colorbar:
            self.colorbar = make_colorbar(self.overlay)
            self.addItem(self.colorbar, row=1, col=1)
        else:
            self.overlay.setColorMap(colormap("viridis"))
        self.region = (0.0, 0.0, 1.0, 1.0)
        self.grid = (1, 1)
        self._map: np.ndarray | None = None
        self._cmap_name = "viridis"
        self._pointer: QPointF | None = None  # the pointer's scene position while it is here
        self.scene().sigMouseMoved.connect(self._on_move)
        self.scene().sigMouseClicked.connect(self._on_click)

    # -- content ---------------------------------------------------------------------------------
    def set_image(
        self, rgb: np.ndarray, region: tuple[float, float, float, float], grid: tuple[int, int]
    ) -> None:
        """Show ``rgb`` (h, w, 3) uint8; the model's grid covers ``region`` of it."""
        same_size = self.image.image is not None and self.image.image.shape == rgb.shape
        self.image.setImage(rgb, autoLevels=False, levels=(0, 255))
        self.region, self.grid = tuple(float(v) for v in region), tuple(grid)
        self._draw_grid()
        self._draw_dim(rgb.shape[1], rgb.shape[0])
        left, top, right, bottom = self.region
        self.overlay.setRect(QRectF(left, top, right - left, bottom - top))
        self.rgb_overlay.setRect(QRectF(left, top, right - left, bottom - top))
        if not same_size:  # fitted to the image alone: the marks still on the last model's
            # grid (its query box, its windows) are redrawn after and must not widen the view
            self.vb.autoRange(padding=0.02, items=[self.image])
        if self._pointer is not None:  # the pointer stays: say what is under it now
            self._on_move(self._pointer)

    def set_map(
        self,
        values: np.ndarray | None,
        levels: tuple[float, float] | None = None,
        cmap: str | None = None,
        opacity: float | None = None,
        scale_label: str = "",
    ) -> None:
        """Show a (gh, gw) float map over the region (None hides it); ``scale_label`` is
        written along its colour bar (what the scale is, e.g. one shared by two maps)."""
        if cmap is not None and cmap != self._cmap_name:
            self._cmap_name = cmap
            if self.colorbar is not None:
                self.colorbar.setColorMap(colormap(cmap))
            else:
                self.overlay.setColorMap(colormap(cmap))
        if opacity is not None:
            self.overlay.setOpacity(opacity)
            self.rgb_overlay.setOpacity(opacity)
        self._map = values
        self.rgb_overlay.hide()
        if values is not None and values.ndim == 3:  # (h, w, 3) colours in [0, 1]
            self._show_rgb(values)
            return
        self._show_notice(None if values is None else flat_value(values))
        if values is None:
            self.overlay.hide()
            if self.colorbar is not None:  # no map: no scale that would suggest one
                self.colorbar.hide()
            return
        if self.colorbar is not None:
            self.colorbar.show()
        lo, hi = levels if levels is not None else nice_levels(values)
        self.overlay.setImage(values, autoLevels=False, levels=(lo, hi))
        if self.colorbar is not None:
            set_colorbar_levels(self.colorbar, (lo, hi), label=scale_label)
        left, top, right, bottom = self.region
        self.overlay.setRect(QRectF(left, top, right - left, bottom - top))
        self.overlay.show()

    def _show_rgb(self, values: np.ndarray) -> None:
        """An RGB map over the region, no colour scale (its colours are its values)."""
        self._show_notice(None)
        self.overlay.hide()
        if self.colorbar is not None:
            self.colorbar.hide()
        colours = np.nan_to_num(np.clip(values, 0.0, 1.0)).astype(np.float32)
        self.rgb_overlay.setImage(colours, autoLevels=False, levels=(0.0, 1.0))
        left, top, right, bottom = self.region
        self.rgb_overlay.setRect(QRectF(left, top, right - left, bottom - top))
        self.rgb_overlay.show()

    def _show_notice(self, flat: float | None) -> None:
        if flat is None:
            self._flat_text = ""
        elif np.isnan(flat):
            self._flat_text = "This map has no finite value: nothing to show."
        else:
            self._flat_text = (
                f"Flat map: every patch has the value {flat:.4g}. This method sees no "
                "difference between the patches here (e.g. an untrained model)."
            )
        self._update_notice()

    def set_message(self, text: str | None, details: str | None = None) -> None:
        """Words shown in the view, over the map (a method shown instead of the chosen one and
        why, a scale that leaves a cell out): wrapped; None or "" hides them. ``details``: the
        same in full, the notice's tooltip (None: ``text`` is whole)."""
        self._view_text = text or ""
        self._view_details = details or self._view_text
        self._update_notice()

    def notice_text(self) -> str:
        """What the view says over the map ("" when nothing)."""
        return self.notice.text() if not self.notice.isHidden() else ""

    def _update_notice(self) -> None:
        text = "\n\n".join(t for t in (self._view_text, self._flat_text) if t)
        if not text:
            self.notice.hide()
            return
        self._notice_text = text
        self._notice_full = "\n\n".join(t for t in (self._view_details, self._flat_text) if t)
        self._place_notice()
        self.notice.show()
        self.notice.raise_()

    def _place_notice(self) -> None:
        """At the foot of the image's view (the colour bar's labels stay readable), at most
        NOTICE_SHARE of its height: the notes that don't fit are left to the tooltip."""
        bar = 0 if self.colorbar is None else int(self.colorbar.geometry().width())
        room = self.width() - bar
        width = min(max(room - 24, 100), 520)
        self.notice.setFixedWidth(width)
        parts = self._notice_text.split("\n\n")
        for count in range(len(parts), 0, -1):
            more = "" if count == len(parts) else "\n…"  # the rest in the tooltip
            self.notice.setText("\n\n".join(parts[:count]) + more)
            # its height at this width: adjustSize() keeps the size hint of the width the words
            # last had (a narrower view would cut the second line off)
            tall = self.notice.heightForWidth(width)
            self.notice.resize(width, tall if tall > 0 else self.notice.sizeHint().height())
            if self.notice.height() <= NOTICE_SHARE * self.height():
                break
        whole = self.notice.text() == self._notice_full
        self.notice.setToolTip("" if whole else self._notice_full)
        top = max(TITLE_HEIGHT + 4, self.height() - self.notice.height() - 8)
        self.notice.move(max(0, (room - width) // 2), top)

    def set_title(self, text: str) -> None:
        if text != self.full_title:
            self.full_title = text
            self._fit_title()

    def _fit_title(self) -> None:
        """The title as it fits the view's width (``fitted_title``); shortened, the whole of it
        in the tooltip."""
        room = self.width() - 8
        shown = fitted_title(self.full_title, self.title.fontMetrics(), room)
        if shown != self.title.text():
            self.title.setText(shown)
        self.title.setToolTip("" if shown == self.full_title else self.full_title)

    def resizeEvent(self, event: object) -> None:
        super().resizeEvent(event)
        title = getattr(self, "title", None)  # pyqtgraph resizes once before __init__ ends
        if title is not None:
            title.setGeometry(0, 2, self.width(), TITLE_HEIGHT)
            self._fit_title()
            self._place_notice()

    def set_query(self, patch: tuple[int, int] | None) -> None:
        if patch is None:
            self.query_box.hide()
            return
        self.query_box.setRect(self.patch_rect(*patch))
        self.query_box.show()

    def set_windows(self, lines: np.ndarray | None, query: np.ndarray | None = None) -> None:
        """Outline a window partition: (K, 4) segments (x0, y0, x1, y1) in image pixels, and
        the query's window (None: nothing)."""
        self.window_lines.setPath(_segments_path(lines))
        self.query_window.setPath(_segments_path(query))

    def set_query_rect(self, rect: QRectF) -> None:
        """Outline the query as ``rect`` in image pixels (a token coarser than the grid)."""
        self.query_box.setRect(rect)
        self.query_box.show()

    def set_grid_visible(self, visible: bool) -> None:
        self.grid_lines.setVisible(visible)

    # -- geometry --------------------------------------------------------------------------------
    def patch_rect(self, row: int, col: int) -> QRectF:
        left, top, right, bottom = self.region
        gh, gw = self.grid
        cw, ch = (right - left) / gw, (bottom - top) / gh
        return QRectF(left + col * cw, top + row * ch, cw, ch)

    def patch_at(self, x: float, y: float) -> tuple[int, int] | None:
        left, top, right, bottom = self.region
        if not (left <= x < right and top <= y < bottom):
            return None
        gh, gw = self.grid
        col = min(gw - 1, math.floor((x - left) / (right - left) * gw))
        row = min(gh - 1, math.floor((y - top) / (bottom - top) * gh))
        return row, col

    def map_cell(self, row: int, col: int) -> tuple[int, int, tuple[int, int]]:
        """The shown map's cell under a cell of the grid, and the map's (rows, cols): a coarser
        map (a layer's own tokens) has cells of its own; with no map, the grid's."""
        gh, gw = self.grid
        mh, mw = self._map.shape[:2] if self._map is not None else (gh, gw)
        return row * mh // gh, col * mw // gw, (mh, mw)

    def value_at(self, row: int, col: int) -> float:
        """The shown map's value at a cell of the grid (NaN off the grid or with no map)."""
        gh, gw = self.grid
        if self._map is None or self._map.ndim != 2 or not self.overlay.isVisible():
            return float("nan")  # no map, or colours (an RGB map) rather than values
        if not (0 <= row < gh and 0 <= col < gw):
            return float("nan")
        r, c, _ = self.map_cell(row, col)
        return float(self._map[r, c])

    def _draw_grid(self) -> None:
        left, top, right, bottom = self.region
        gh, gw = self.grid
        path = QPainterPath()
        for x in np.linspace(left, right, gw + 1):
            path.moveTo(x, top)
            path.lineTo(x, bottom)
        for y in np.linspace(top, bottom, gh + 1):
            path.moveTo(left, y)
            path.lineTo(right, y)
        self.grid_lines.cell = min((right - left) / gw, (bottom - top) / gh)
        self.grid_lines.setPath(path)

    def _draw_dim(self, width: int, height: int) -> None:
        """Darken what the model did not see (outside the region)."""
        path = QPainterPath()
        path.addRect(QRectF(0, 0, width, height))
        left, top, right, bottom = self.region
        inner = QPainterPath()
        inner.addRect(QRectF(left, top, right - left, bottom - top))
        self.dim.setPath(path.subtracted(inner))

    # -- mouse ---------------------------------------------------------------------------------
    def _scene_to_patch(self, scene_pos: QPointF) -> tuple[int, int] | None:
        if self.image.image is None or not self.vb.sceneBoundingRect().contains(scene_pos):
            return None
        p = self.vb.mapSceneToView(scene_pos)
        return self.patch_at(p.x(), p.y())

    def _on_move(self, scene_pos: QPointF) -> None:
        self._pointer = QPointF(scene_pos)
        patch = self._scene_to_patch(scene_pos)
        self.patchHovered.emit(None if patch is None else (*patch, self.value_at(*patch)))

    def leaveEvent(self, event: object) -> None:
        super().leaveEvent(event)
        if self._pointer is not None:
            self._pointer = None
            self.patchHovered.emit(None)

    def _on_click(self, event) -> None:
        if event.button() != Qt.MouseButton.LeftButton or event.double():
            return
        patch = self._scene_to_patch(event.scenePos())
        if patch is not None:
            event.accept()
            self.patchClicked.emit(*patch)
