"""HeadGrid: the layer × head thumbnails (plus a mean-of-heads column) on one colour scale.

All thumbnails are one mosaic image over one mosaic of the input, so a change of query repaints
two images, not L × H widgets.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PIL import Image
from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QFont, QPen
from PySide6.QtWidgets import QGraphicsRectItem

from vitviz.ui.colors import colormap, set_colorbar_levels
from vitviz.ui.image_item import ImageItem

GAP = 1  # cells between tiles
MEAN = -1  # head index of the mean-of-heads column


def tile_origin(
    layer: int, column: int, grid: tuple[int, int], layers_on_x: bool
) -> tuple[int, int]:
    """(x, y) in cells of the tile of ``layer`` and ``column`` (0 = mean, 1.. = heads)."""
    gh, gw = grid
    if layers_on_x:
        return layer * (gw + GAP), column * (gh + GAP)
    return column * (gw + GAP), layer * (gh + GAP)


def mosaic_shape(
    layers: int, heads: int, grid: tuple[int, int], layers_on_x: bool = False
) -> tuple[int, int]:
    """(rows, cols) in cells of the mosaic with ``heads + 1`` tile columns (mean first)."""
    gh, gw = grid
    across, down = (layers, heads + 1) if layers_on_x else (heads + 1, layers)
    return down * (gh + GAP) - GAP, across * (gw + GAP) - GAP


def build_mosaic(
    head_maps: np.ndarray, mean_maps: np.ndarray, layers_on_x: bool = False
) -> np.ndarray:
    """(L, H, gh, gw) + (L, gh, gw) -> one float32 mosaic, NaN between tiles."""
    L, H, gh, gw = head_maps.shape
    padded = np.full((L, H + 1, gh + GAP, gw + GAP), np.nan, dtype=np.float32)
    padded[:, 0, :gh, :gw] = mean_maps
    padded[:, 1:, :gh, :gw] = head_maps
    if layers_on_x:  # rows of tiles = columns (mean, heads), across = layers
        grid = padded.transpose(1, 2, 0, 3).reshape((H + 1) * (gh + GAP), L * (gw + GAP))
    else:  # rows of tiles = layers, across = columns
        grid = padded.transpose(0, 2, 1, 3).reshape(L * (gh + GAP), (H + 1) * (gw + GAP))
    return grid[:-GAP, :-GAP] if GAP else grid


def build_base(
    pixels: np.ndarray,
    layers: int,
    heads: int,
    grid: tuple[int, int],
    cell: int,
    layers_on_x: bool = False,
) -> np.ndarray:
    """The input image, grey and dimmed, repeated under every tile: (rows·cell, cols·cell, 3)."""
    gh, gw = grid
    thumb = (
        Image.fromarray(pixels)
        .convert("L")
        .resize((gw * cell, gh * cell), Image.Resampling.BILINEAR)
    )
    tile = (np.asarray(thumb, dtype=np.float32) * 0.8).astype(np.uint8)
    rows, cols = mosaic_shape(layers, heads, grid, layers_on_x)
    out = np.full((rows * cell, cols * cell), 30, dtype=np.uint8)
    for c in range(heads + 1):
        for layer in range(layers):
            x, y = tile_origin(layer, c, grid, layers_on_x)
            out[y * cell : (y + gh) * cell, x * cell : (x + gw) * cell] = tile
    return np.repeat(out[:, :, None], 3, axis=2)


class HeadGrid(pg.GraphicsLayoutWidget):
    """Click a tile to select (layer, head); head == MEAN for the mean-of-heads column."""

    cellClicked = Signal(int, int)  # layer, head (MEAN = -1)

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
        self.colorbar = pg.ColorBarItem(
            values=(0, 1), colorMap=colormap("viridis"), interactive=False, width=14
        )
        self.colorbar.setImageItem(self.maps)
        self.addItem(self.colorbar, row=0, col=1)
        self.selection = QGraphicsRectItem()
        pen = QPen(QColor(255, 60, 60))
        pen.setCosmetic(True)
        pen.setWidthF(2.5)
        self.selection.setPen(pen)
        self.selection.setZValue(30)
        self.vb.addItem(self.selection)
        self._labels: list[pg.TextItem] = []
        self.shape = (0, 0)  # (layers, heads)
        self.grid = (1, 1)
        self.layers_on_x = False  # more layers than heads: layers run across
        self._cmap = "viridis"
        self._shown: tuple | None = None  # what set_maps last drew (arrays compared by identity)
        self.scene().sigMouseClicked.connect(self._on_click)

    def set_layout(
        self, layers: int, heads: int, grid: tuple[int, int], pixels: np.ndarray
    ) -> None:
        """New model or image: rebuild labels and the image mosaic."""
        changed = (layers, heads, tuple(grid)) != (*self.shape, self.grid)
        self.shape, self.grid = (layers, heads), tuple(grid)
        self.layers_on_x = layers > heads + 1
        gh, gw = grid
        cell = max(1, round(40 / max(gh, gw)))
        rows, cols = mosaic_shape(layers, heads, grid, self.layers_on_x)
        self.base.setImage(
            build_base(pixels, layers, heads, grid, cell, self.layers_on_x),
            autoLevels=False,
            levels=(0, 255),
        )
        self.base.setRect(QRectF(0, 0, cols, rows))
        if changed:
            self._make_labels()
            self.vb.setRange(
                QRectF(-gw * 1.2, -gh * 0.8, cols + gw * 1.2, rows + gh * 0.8), padding=0.01
            )

    def _make_labels(self) -> None:
        for item in self._labels:
            self.vb.removeItem(item)
        self._labels = []
        layers, heads = self.shape
        gh, gw = self.grid
        top = (0.5, 1.0)  # anchor: centred above a tile
        side = (1.0, 0.5)  # anchor: right-aligned left of a tile
        many = heads > 8  # narrow tiles: short labels in a smaller font
        font = QFont()
        font.setPointSizeF(7.0 if many else font.pointSizeF())
        for c in range(heads + 1):
            x, y = tile_origin(0, c, self.grid, self.layers_on_x)
            text = ("μ" if many else "mean") if c == 0 else f"H{c}"
            item = pg.TextItem(text, color="#cccccc", anchor=side if self.layers_on_x else top)
            item.setFont(font)
            item.setPos(*((x - 0.2, y + gh / 2) if self.layers_on_x else (x + gw / 2, -0.1)))
            self._labels.append(item)
        for layer in range(layers):
            x, y = tile_origin(layer, 0, self.grid, self.layers_on_x)
            item = pg.TextItem(
                f"L{layer + 1}", color="#cccccc", anchor=top if self.layers_on_x else side
            )
            item.setPos(*((x + gw / 2, -0.1) if self.layers_on_x else (-0.2, y + gh / 2)))
            self._labels.append(item)
        for item in self._labels:
            self.vb.addItem(item)

    def set_maps(
        self,
        head_maps: np.ndarray,
        mean_maps: np.ndarray,
        levels: tuple[float, float],
        cmap: str,
        opacity: float,
    ) -> None:
        shown = (head_maps, mean_maps, (tuple(levels), cmap, opacity, self.shape, self.grid))
        last = self._shown
        if last and last[0] is head_maps and last[1] is mean_maps and last[2] == shown[2]:
            return  # a new layer or head only moves the selection: nothing to redraw here
        self._shown = shown
        if cmap != self._cmap:
            self._cmap = cmap
            self.colorbar.setColorMap(colormap(cmap))
        rows, cols = mosaic_shape(*self.shape, self.grid, self.layers_on_x)
        self.maps.setImage(
            build_mosaic(head_maps, mean_maps, self.layers_on_x), autoLevels=False, levels=levels
        )
        self.maps.setRect(QRectF(0, 0, cols, rows))
        self.maps.setOpacity(opacity)
        set_colorbar_levels(self.colorbar, levels)

    def set_selection(self, layer: int, head: int) -> None:
        gh, gw = self.grid
        x, y = tile_origin(layer, 0 if head == MEAN else head + 1, self.grid, self.layers_on_x)
        self.selection.setRect(QRectF(x, y, gw, gh))

    def cell_at(self, x: float, y: float) -> tuple[int, int] | None:
        """(layer, head) of the tile under view coordinates (x, y), or None between tiles."""
        layers, heads = self.shape
        gh, gw = self.grid
        if x < 0 or y < 0:
            return None
        i, fx = divmod(x, gw + GAP)
        j, fy = divmod(y, gh + GAP)
        if fx >= gw or fy >= gh:
            return None
        layer, column = (int(i), int(j)) if self.layers_on_x else (int(j), int(i))
        if layer >= layers or column > heads:
            return None
        return layer, (MEAN if column == 0 else column - 1)

    def tile_center(self, layer: int, head: int) -> QPointF:
        """Scene position of a tile's centre (for tests and keyboard focus)."""
        gh, gw = self.grid
        x, y = tile_origin(layer, 0 if head == MEAN else head + 1, self.grid, self.layers_on_x)
        return self.vb.mapViewToScene(QPointF(x + gw / 2, y + gh / 2))

    def _on_click(self, event) -> None:
        if event.button() != Qt.MouseButton.LeftButton or self.shape == (0, 0):
            return
        if not self.vb.sceneBoundingRect().contains(event.scenePos()):
            return
        p = self.vb.mapSceneToView(event.scenePos())
        cell = self.cell_at(p.x(), p.y())
        if cell is not None:
            event.accept()
            self.cellClicked.emit(*cell)
