"""HeadGrid: the layer × head thumbnails (plus a mean-of-heads column) on one colour scale, or
each tile on its own (``set_per_head``).

All thumbnails are one mosaic image over one mosaic of the input, so a change of query repaints
two images, not L × H widgets. The mosaic is laid out for the space the widget has: layers run
down, heads across, and when that leaves the tiles small the layers wrap into side-by-side bands
(layers 1-6 | 7-12), whichever makes the tiles largest. Wheel zooms, drag pans, double-click fits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PIL import Image
from PySide6.QtCore import QPointF, QRectF, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QFont, QFontMetrics, QPen
from PySide6.QtWidgets import QGraphicsRectItem

from vitviz.imaging.overlay import scale_each_tile
from vitviz.ui.colors import colormap, make_colorbar, set_colorbar_levels
from vitviz.ui.image_item import ImageItem

GAP = 1  # cells between tiles
MEAN = -1  # head index of the mean-of-heads column
LABEL_PX = 30  # room left of each band for its row labels ("L12")
WIDE_LABEL_PX = 48  # … and for longer ones ("3.6 SW")
SHORT_LABEL = 4  # characters that fit in LABEL_PX
HEADER_PX = 18  # room above the tiles for the column labels ("H12")
EDGE_PX = 4  # room between the tiles (and their labels) and the view's edges, all round
COLORBAR_PX = 44  # the colour bar and its labels, below the tiles (their width is scarcer)
MIN_TILE_CELLS = 12  # a small patch grid is drawn with k × k cells a patch: gaps stay thin
LABEL_GAP_PX = 6  # at least this much room between two column labels, else they are thinned
LABEL_POINTS = (7.5, 9.0)  # the labels' font size beside small tiles (under 30 px), and else
BASE_MAX_SIDE = 4096  # the greyed input under the tiles is drawn at most this large
LABEL_COLOR, SELECTED_COLOR = "#cccccc", "#ff6b6b"
PER_HEAD_TICKS = [(0.0, "0"), (1.0, "max")]  # the colour bar of the per-head scale
PER_HEAD_LABEL = "per head: each tile its own scale"


@dataclass(frozen=True)
class GridLayout:
    """Where every tile goes, in cells (view coordinates); a patch is ``sub`` × ``sub`` cells.

    Band b holds layers b·rows … b·rows + rows − 1, one per tile row; tile column 0 is the mean
    of heads, column h + 1 head h. Each band has ``margin`` cells on its left for row labels;
    ``header`` cells above all bands hold the column labels; the view shows ``edge`` cells more
    on every side (``HeadGrid.fit``), so nothing touches its edges.
    """

    layers: int
    heads: int
    grid: tuple[int, int]  # (gh, gw) patches of one tile
    bands: int = 1
    margin: int = 0
    header: int = 0
    sub: int = 1  # cells per patch along each side
    edge: int = 0  # cells of room round the mosaic in the view

    @property
    def tile(self) -> tuple[int, int]:
        """(height, width) of one tile in cells."""
        return self.grid[0] * self.sub, self.grid[1] * self.sub

    @property
    def columns(self) -> int:
        return self.heads + 1

    @property
    def rows(self) -> int:
        """Layer rows per band."""
        return math.ceil(self.layers / self.bands)

    @property
    def band_width(self) -> int:
        return self.margin + self.columns * (self.tile[1] + GAP)

    @property
    def size(self) -> tuple[int, int]:
        """(height, width) of the whole mosaic in cells, labels' room included."""
        height = self.header + self.rows * (self.tile[0] + GAP) - GAP
        return height, self.bands * self.band_width - GAP

    def origin(self, layer: int, column: int) -> tuple[int, int]:
        """(x, y) in cells of the top-left of ``layer``'s tile in ``column`` (0 = mean)."""
        gh, gw = self.tile
        band, row = divmod(layer, self.rows)
        return band * self.band_width + self.margin + column * (gw + GAP), self.header + row * (
            gh + GAP
        )

    def cell_at(self, x: float, y: float) -> tuple[int, int] | None:
        """(layer, column) of the tile under (x, y), or None outside the tiles."""
        gh, gw = self.tile
        if x < 0 or y < self.header:
            return None
        band, bx = divmod(x, self.band_width)
        column, fx = divmod(bx - self.margin, gw + GAP)
        row, fy = divmod(y - self.header, gh + GAP)
        if bx < self.margin or fx >= gw or fy >= gh or column >= self.columns:
            return None
        layer = int(band) * self.rows + int(row)
        if row >= self.rows or layer >= self.layers:
            return None
        return layer, int(column)


def plan_layout(
    layers: int,
    heads: int,
    grid: tuple[int, int],
    width_px: float,
    height_px: float,
    label_px: float = LABEL_PX,
) -> tuple[GridLayout, float]:
    """The banding that makes the tiles largest in a view of ``width_px`` × ``height_px``;
    returns it with its scale (pixels per cell)."""
    sub = max(1, math.ceil(MIN_TILE_CELLS / max(1, min(grid))))
    gh, gw = grid[0] * sub, grid[1] * sub
    columns = heads + 1
    best: tuple[float, int] | None = None
    for bands in range(1, max(1, layers) + 1):
        rows = math.ceil(layers / bands)
        if bands > 1 and math.ceil(layers / (bands - 1)) == rows:
            continue  # the same rows as with one band fewer
        tiles_w = bands * columns * (gw + GAP) - GAP
        tiles_h = rows * (gh + GAP) - GAP
        avail_w = max(1.0, width_px - bands * label_px - 2 * EDGE_PX)
        avail_h = max(1.0, height_px - HEADER_PX - 2 * EDGE_PX)
        scale = min(avail_w / tiles_w, avail_h / tiles_h)
        if best is None or scale > best[0] * 1.001:  # ties: fewer bands
            best = (scale, bands)
    scale, bands = best if best is not None else (1.0, 1)
    margin = max(GAP, math.ceil(label_px / scale))
    header = max(1, math.ceil(HEADER_PX / scale))
    edge = max(1, math.ceil(EDGE_PX / scale))
    return GridLayout(layers, heads, tuple(grid), bands, margin, header, sub, edge), scale


def build_mosaic(head_maps: np.ndarray, mean_maps: np.ndarray, layout: GridLayout) -> np.ndarray:
    """(L, H, gh, gw) + (L, gh, gw) -> one float32 mosaic of ``layout.size``, NaN off the tiles."""
    k = layout.sub
    if k > 1:  # each patch as k × k cells
        head_maps = head_maps.repeat(k, axis=-2).repeat(k, axis=-1)
        mean_maps = mean_maps.repeat(k, axis=-2).repeat(k, axis=-1)
    L, H, gh, gw = head_maps.shape
    padded = np.full((L, H + 1, gh + GAP, gw + GAP), np.nan, dtype=np.float32)
    padded[:, 0, :gh, :gw] = mean_maps
    padded[:, 1:, :gh, :gw] = head_maps
    out = np.full(layout.size, np.nan, dtype=np.float32)
    rows = layout.rows
    for band in range(layout.bands):
        chunk = padded[band * rows : (band + 1) * rows]  # (n, H+1, gh+GAP, gw+GAP)
        if chunk.shape[0] == 0:
            break
        n = chunk.shape[0]
        block = chunk.transpose(0, 2, 1, 3).reshape(n * (gh + GAP), (H + 1) * (gw + GAP))
        x, y = layout.origin(band * rows, 0)
        h = min(block.shape[0], out.shape[0] - y)
        w = min(block.shape[1], out.shape[1] - x)
        out[y : y + h, x : x + w] = block[:h, :w]
    return out


def build_base(
    pixels: np.ndarray, layout: GridLayout, cell: int, row_heads: list[int] | None = None
) -> np.ndarray:
    """The input image, grey and dimmed, under every tile: (rows·cell, cols·cell, 3) uint8;
    ``row_heads``: heads per layer row (where they differ), the tiles beyond left empty."""
    gh, gw = layout.tile
    thumb = (
        Image.fromarray(pixels)
        .convert("L")
        .resize((gw * cell, gh * cell), Image.Resampling.BILINEAR)
    )
    tile = (np.asarray(thumb, dtype=np.float32) * 0.8).astype(np.uint8)
    rows, cols = layout.size
    out = np.full((rows * cell, cols * cell), 30, dtype=np.uint8)
    for layer in range(layout.layers):
        for c in range(layout.columns):
            if row_heads is not None and c > row_heads[layer]:
                continue
            x, y = layout.origin(layer, c)
            out[y * cell : (y + gh) * cell, x * cell : (x + gw) * cell] = tile
    return np.repeat(out[:, :, None], 3, axis=2)


def column_text(column: int, short: bool) -> str:
    return ("μ" if short else "mean") if column == 0 else f"H{column - 1}"  # heads from 0


class HeadGrid(pg.GraphicsLayoutWidget):
    """Click a tile to select (layer, head); head == MEAN for the mean-of-heads column.

    Hovering a tile says its layer, head and the value under the pointer (``cellHovered`` and
    the tooltip).
    """

    cellClicked = Signal(int, int)  # layer, head (MEAN = -1)
    cellHovered = Signal(object)  # (layer, head, value) or None off the tiles
    layoutChanged = Signal()  # the tiles moved (items drawn over them follow)

    def __init__(self, parent=None) -> None:
        super().__init__(parent=parent)
        self.setAcceptDrops(False)
        self.setBackground("#202020")
        self.ci.layout.setContentsMargins(2, 2, 2, 2)
        self.vb: pg.ViewBox = self.addViewBox(
            row=0, col=0, lockAspect=True, invertY=True, enableMenu=False
        )
        self.base = ImageItem(axisOrder="row-major")
        self.maps = ImageItem(axisOrder="row-major")
        self.maps.setZValue(10)
        self.vb.addItem(self.base)
        self.vb.addItem(self.maps)
        # below the tiles: a grid of many heads is as wide as the window lets it be (2 bands of
        # 13 columns at 1280 px), with height to spare
        self.colorbar = make_colorbar(self.maps, horizontal=True)
        self.addItem(self.colorbar, row=1, col=0)
        self.selection = QGraphicsRectItem()
        pen = QPen(QColor(255, 60, 60))
        pen.setCosmetic(True)
        pen.setWidthF(3.0)
        self.selection.setPen(pen)
        self.selection.setZValue(30)
        self.vb.addItem(self.selection)
        self.layout = GridLayout(0, 0, (1, 1))
        self.scale = 1.0  # pixels per cell when the mosaic fits the view
        self._pixels: np.ndarray | None = None
        self._row_labels: list[pg.TextItem] = []
        self._row_texts: list[str] | None = None  # e.g. "L3", "1.2 SW"; None: "L1", "L2", …
        self._row_heads: list[int] | None = None  # heads per row (where they may differ)
        self._column_labels: dict[int, list[pg.TextItem]] = {}  # column -> one per band
        self._selected: tuple[int, int] = (-1, -1)  # (layer, column) highlighted
        self._cmap = "viridis"
        self._shown: tuple | None = None  # what set_maps last drew (arrays compared by identity)
        self._values: tuple[np.ndarray, np.ndarray] | None = None  # head maps, mean maps
        self._last_style: tuple = ((0.0, 1.0), "viridis", 1.0)  # levels, colour map, opacity
        self.per_head = False  # each tile on its own scale (0 to its max), not the shared one
        self._relayout = QTimer(self, singleShot=True, interval=0)
        self._relayout.timeout.connect(self._fit_to_size)
        self.scene().sigMouseClicked.connect(self._on_click)
        self.scene().sigMouseMoved.connect(self._on_move)

    # -- layout ----------------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, int]:
        return self.layout.layers, self.layout.heads

    @property
    def grid(self) -> tuple[int, int]:
        return self.layout.grid

    def set_layout(
        self,
        layers: int,
        heads: int,
        grid: tuple[int, int],
        pixels: np.ndarray,
        row_labels: list[str] | None = None,
        row_heads: list[int] | None = None,
    ) -> None:
        """New model or image: lay the tiles out for the space there is and draw the input.
        ``row_labels`` name the rows (default L1, L2, …); ``row_heads``: heads per row, the
        tiles beyond a row's heads left empty (e.g. a Swin's stages have different numbers)."""
        if (layers, heads, tuple(grid), row_heads) != (*self.shape, self.grid, self._row_heads):
            self._values = self._shown = None  # the last model's maps: not drawn in this layout
            self.maps.clear()
        self._pixels = pixels
        self._row_texts, self._row_heads = row_labels, row_heads
        self._apply_layout(layers, heads, tuple(grid), force=True)

    def row_texts(self) -> list[str]:
        """The row labels as shown (tests)."""
        return [item.textItem.toPlainText() for item in self._row_labels]

    def row_heads(self) -> list[int]:
        """The tiles per row besides the mean: each row's heads (all the same for a ViT)."""
        return list(self._row_heads or [self.layout.heads] * self.layout.layers)

    def tile_size_px(self) -> float:
        """On-screen size of one tile's longer side when the mosaic fits the view."""
        return self.scale * max(self.layout.tile)

    def fit(self) -> None:
        """Show the whole mosaic (after zooming or panning), ``edge`` cells of room round it."""
        rows, cols = self.layout.size
        e = self.layout.edge
        self.vb.setRange(QRectF(-e, -e, cols + 2 * e, rows + 2 * e), padding=0.0)

    def resizeEvent(self, event: object) -> None:
        super().resizeEvent(event)
        timer = getattr(self, "_relayout", None)  # pyqtgraph resizes once before __init__ ends
        if timer is not None:
            timer.start()

    def _fit_to_size(self) -> None:
        if self._pixels is not None and not getattr(self, "closed", False):  # (items gone)
            self._apply_layout(*self.shape, self.grid, force=False)

    def _view_px(self) -> tuple[float, float]:
        # the bar's room (its height is 0 before the first layout); none while it is hidden
        bar = (self.colorbar.geometry().height() or COLORBAR_PX) if self.colorbar.isVisible() else 0
        return max(1.0, self.width() - 8.0), max(1.0, self.height() - bar - 8.0)

    def scale_at_height(self, height_px: float) -> float:
        """Pixels per cell the tiles would have if this view were ``height_px`` high (its width
        as now): how much a taller view would help."""
        width, now = self._view_px()
        tiles_px = max(1.0, height_px - (self.height() - now))  # less the bar and the margins
        return plan_layout(*self.shape, self.grid, width, tiles_px, self._label_px())[1]

    def _label_px(self, layers: int | None = None) -> float:
        """Room for the row labels: what the widest needs in the larger label font, at most
        LABEL_PX (WIDE_LABEL_PX for labels longer than "L123")."""
        texts = self._row_texts or [f"L{i}" for i in range(layers or self.layout.layers or 1)]
        most = LABEL_PX if all(len(t) <= SHORT_LABEL for t in texts) else WIDE_LABEL_PX
        font = QFont()
        font.setPointSizeF(LABEL_POINTS[1])
        need = max(QFontMetrics(font).horizontalAdvance(t) for t in texts) + LABEL_GAP_PX
        return float(min(most, need))

    def _apply_layout(self, layers: int, heads: int, grid: tuple[int, int], *, force: bool) -> None:
        label_px = self._label_px(layers)
        layout, scale = plan_layout(layers, heads, grid, *self._view_px(), label_px)
        self.scale = scale
        if layout != self.layout or force:
            self.layout = layout
            cell = max(1, min(round(scale), 24, BASE_MAX_SIDE // max(layout.size)))
            assert self._pixels is not None
            base = build_base(self._pixels, layout, cell, self._row_heads)
            self.base.setImage(base, autoLevels=False)
            self.base.setLevels((0, 255))
            rows, cols = layout.size
            self.base.setRect(QRectF(0, 0, cols, rows))
            self._make_labels()
            if self._values is not None and self._shown is not None:
                self._shown = None  # redraw the maps in the new layout
                head_maps, mean_maps = self._values
                self.set_maps(head_maps, mean_maps, *self._last_style)
            layer, column = self._selected
            self._selected = (-1, -1)
            if layer >= 0:
                self.set_selection(layer, MEAN if column == 0 else column - 1)
            self.layoutChanged.emit()
        self.fit()

    def _make_labels(self) -> None:
        for item in [*self._row_labels, *(i for v in self._column_labels.values() for i in v)]:
            self.vb.removeItem(item)
        lay = self.layout
        gh, gw = lay.tile
        tile_px = self.scale * gw
        short = tile_px < 40
        font = QFont()
        font.setPointSizeF(LABEL_POINTS[0] if tile_px < 30 else LABEL_POINTS[1])
        widest = QFontMetrics(font).horizontalAdvance(column_text(lay.columns - 1, short))
        every = max(1, math.ceil((widest + LABEL_GAP_PX) / max(tile_px, 1e-6)))  # H1, H3, …
        self._column_labels = {}
        for band in range(lay.bands):
            if band * lay.rows >= lay.layers:
                break
            for c in range(lay.columns):
                if c % every and c != 0:
                    continue
                x, _ = lay.origin(band * lay.rows, c)
                item = pg.TextItem(column_text(c, short), color=LABEL_COLOR, anchor=(0.5, 1.0))
                item.setFont(font)
                item.setPos(x + gw / 2, lay.header - 0.1)
                self._column_labels.setdefault(c, []).append(item)
        row_every = max(1, math.ceil(12 / max(self.scale * gh, 1e-6)))
        self._row_labels = []
        for layer in range(lay.layers):
            x, y = lay.origin(layer, 0)
            text = f"L{layer}" if self._row_texts is None else self._row_texts[layer]
            item = pg.TextItem(text, color=LABEL_COLOR, anchor=(1.0, 0.5))
            item.setFont(font)
            item.setPos(x - 0.2, y + gh / 2)
            item.setVisible(layer % row_every == 0 or layer == lay.layers - 1)
            self._row_labels.append(item)
        for item in [*self._row_labels, *(i for v in self._column_labels.values() for i in v)]:
            self.vb.addItem(item)

    # -- content ---------------------------------------------------------------------------------
    def set_maps(
        self,
        head_maps: np.ndarray,
        mean_maps: np.ndarray,
        levels: tuple[float, float],
        cmap: str,
        opacity: float,
    ) -> None:
        style = (tuple(levels), cmap, opacity, self.layout, self.per_head)
        shown = (head_maps, mean_maps, style)
        last = self._shown
        if last and last[0] is head_maps and last[1] is mean_maps and last[2] == shown[2]:
            return  # a new layer or head only moves the selection: nothing to redraw here
        self._shown = shown
        self._values = (head_maps, mean_maps)
        self._last_style = (levels, cmap, opacity)
        if cmap != self._cmap:
            self._cmap = cmap
            self.colorbar.setColorMap(colormap(cmap))
        rows, cols = self.layout.size
        if self.per_head:
            mosaic = build_mosaic(
                scale_each_tile(head_maps), scale_each_tile(mean_maps), self.layout
            )
            self.maps.setImage(mosaic, autoLevels=False, levels=(0.0, 1.0))
            set_colorbar_levels(self.colorbar, (0.0, 1.0), PER_HEAD_TICKS, PER_HEAD_LABEL)
        else:
            mosaic = build_mosaic(head_maps, mean_maps, self.layout)
            self.maps.setImage(mosaic, autoLevels=False, levels=levels)
            set_colorbar_levels(self.colorbar, levels)
        self.maps.setRect(QRectF(0, 0, cols, rows))
        self.maps.setOpacity(opacity)

    def show_thumbnails(self, on: bool) -> None:
        """Draw the attention thumbnails over the input with their colour bar, or none of them
        (``on`` False: a view colouring the tiles by other values, with a scale of its own, is
        over them; no edge of the input shows round its tiles); the tiles take the bar's room."""
        if on == self.maps.isVisible() == self.colorbar.isVisible():
            return
        for item in (self.base, self.maps, self.colorbar):
            item.setVisible(on)
        self._relayout.start()

    def set_per_head(self, on: bool) -> None:
        """Each tile on its own colour scale (0 to its max), or all on the shared one."""
        if on == self.per_head:
            return
        self.per_head = on
        if self._values is not None and self._shown is not None:
            self.set_maps(*self._values, *self._last_style)

    def set_selection(self, layer: int, head: int) -> None:
        """Outline the tile of (layer, head) and mark its row and column labels."""
        gh, gw = self.layout.tile
        column = 0 if head == MEAN else head + 1
        x, y = self.layout.origin(layer, column)
        self.selection.setRect(QRectF(x, y, gw, gh))
        if (layer, column) == self._selected:
            return
        old_layer, old_column = self._selected
        self._selected = (layer, column)
        self._mark(old_layer, old_column, False)
        self._mark(layer, column, True)

    def _mark(self, layer: int, column: int, on: bool) -> None:
        """Mark the selected tile's row label and its column's label in the layer's band only."""
        color = SELECTED_COLOR if on else LABEL_COLOR
        items = []
        if 0 <= layer < len(self._row_labels):
            band_labels = self._column_labels.get(column, [])
            band = layer // self.layout.rows
            items = [self._row_labels[layer], *band_labels[band : band + 1]]
        for item in items:
            item.setColor(color)
            font = item.textItem.font()
            font.setBold(on)
            item.setFont(font)

    def cell_at(self, x: float, y: float) -> tuple[int, int] | None:
        """(layer, head) of the tile under view coordinates (x, y), or None between tiles."""
        cell = self.layout.cell_at(x, y)
        if cell is None:
            return None
        layer, column = cell
        return layer, (MEAN if column == 0 else column - 1)

    def tile_center(self, layer: int, head: int) -> QPointF:
        """Scene position of a tile's centre (for tests and keyboard focus)."""
        gh, gw = self.layout.tile
        x, y = self.layout.origin(layer, 0 if head == MEAN else head + 1)
        return self.vb.mapViewToScene(QPointF(x + gw / 2, y + gh / 2))

    def tile_rect_px(self, layer: int, head: int) -> QRectF:
        """A tile's rectangle in widget pixels (for layout tests)."""
        gh, gw = self.layout.tile
        x, y = self.layout.origin(layer, 0 if head == MEAN else head + 1)
        top_left = self.mapFromScene(self.vb.mapViewToScene(QPointF(x, y)))
        bottom_right = self.mapFromScene(self.vb.mapViewToScene(QPointF(x + gw, y + gh)))
        return QRectF(top_left.toPointF(), bottom_right.toPointF())

    # -- mouse ---------------------------------------------------------------------------------
    def _on_click(self, event) -> None:
        if event.button() != Qt.MouseButton.LeftButton or self.shape == (0, 0):
            return
        if event.double():
            event.accept()
            self.fit()
            return
        if not self.vb.sceneBoundingRect().contains(event.scenePos()):
            return
        p = self.vb.mapSceneToView(event.scenePos())
        cell = self.cell_at(p.x(), p.y())
        if cell is not None:
            event.accept()
            self.cellClicked.emit(*cell)

    def _on_move(self, scene_pos: QPointF) -> None:
        info = self.hover_info(scene_pos)
        self.setToolTip("" if info is None else self.describe(info))
        self.cellHovered.emit(info)

    def hover_info(self, scene_pos: QPointF) -> tuple[int, int, float] | None:
        """(layer, head, value under the pointer) at a scene position, None off the tiles."""
        if self.shape == (0, 0) or not self.vb.sceneBoundingRect().contains(scene_pos):
            return None
        p = self.vb.mapSceneToView(scene_pos)
        cell = self.cell_at(p.x(), p.y())
        if cell is None:
            return None
        layer, head = cell
        value = float("nan")
        if self._values is not None:
            x, y = self.layout.origin(layer, 0 if head == MEAN else head + 1)
            k = self.layout.sub
            r, c = int((p.y() - y) // k), int((p.x() - x) // k)
            head_maps, mean_maps = self._values
            tile = mean_maps[layer] if head == MEAN else head_maps[layer, head]
            if 0 <= r < tile.shape[0] and 0 <= c < tile.shape[1]:
                value = float(tile[r, c])
        return layer, head, value

    @staticmethod
    def describe(info: tuple[int, int, float]) -> str:
        layer, head, value = info
        who = "mean of heads" if head == MEAN else f"head {head}"
        text = f"layer {layer}, {who}"
        return text + (f": {value:.4g}" if np.isfinite(value) else "")
