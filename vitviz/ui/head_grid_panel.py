"""The head grid with its colour-scale choice above it: one scale shared by every tile (values
compare across heads) or each tile its own (every head's pattern shows, whatever its range);
both go, with the thumbnails' colour bar, while another view colours the tiles."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QSplitter, QVBoxLayout, QWidget

from vitviz.ui.head_grid import HeadGrid

SCALES = (  # data, text, tooltip
    (
        "shared",
        "One scale for all tiles",
        "Every tile on the same colour scale (the bar's numbers): values compare across heads "
        "and layers, but a head with small values looks uniformly dark.",
    ),
    (
        "per-head",
        "Each tile its own scale",
        "Each tile coloured from 0 to its own maximum: every head's pattern shows, but colours "
        "don't compare across tiles. Hover a tile for its values.",
    ),
)
GRID_SHARE = (0.42, 0.6)  # of the left column's height: the least and the most the grid gets
ENOUGH = 0.97  # a grid this close to its largest tiles needs no more height
GOOD_TILE_PX = 64  # … nor one whose tiles are this large already
READABLE_TILE_PX = 32  # but tiles this large where the width allows it (12 × 12 at 1280 × 720)


class HeadGridPanel(QWidget):
    """``grid`` (a HeadGrid) under a one-line bar with the scale combo (``scale``)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.grid = HeadGrid()
        self.scale = QComboBox()
        for data, text, tip in SCALES:
            self.scale.addItem(text, data)
            self.scale.setItemData(self.scale.count() - 1, tip, Qt.ItemDataRole.ToolTipRole)
        self.scale.currentIndexChanged.connect(self._on_scale)
        title = QLabel("<b>Every layer and head</b> · click a tile to show it large")
        bar = QHBoxLayout()
        bar.setContentsMargins(4, 2, 4, 2)
        bar.addWidget(title)
        bar.addStretch(1)
        self.extras = QHBoxLayout()  # widgets others add to the bar (the importance scale)
        bar.addLayout(self.extras)
        self.scale_label = QLabel("Colours:")
        bar.addWidget(self.scale_label)
        bar.addWidget(self.scale)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addLayout(bar)
        layout.addWidget(self.grid, 1)
        self._model: object = None  # the model the splitter was last shared for
        self._on_scale()

    def scale_name(self) -> str:
        """'shared' or 'per-head'."""
        return str(self.scale.currentData())

    def set_scale_name(self, name: str) -> None:
        index = self.scale.findData(name)
        if index >= 0:
            self.scale.setCurrentIndex(index)

    def show_thumbnails(self, on: bool) -> None:
        """The attention thumbnails with their colour bar and the choice of their scale, or
        none of them (the tiles coloured by another view, its scale among ``extras``)."""
        self.grid.show_thumbnails(on)
        self.scale_label.setVisible(on)
        self.scale.setVisible(on)

    def _on_scale(self) -> None:
        self.grid.set_per_head(self.scale_name() == "per-head")
        self.scale.setToolTip(SCALES[max(0, self.scale.currentIndex())][2])

    def share_height(self, splitter: QSplitter, model: object) -> None:
        """A new ``model`` (any key naming it): this panel (the splitter's last part) gets the
        least height between GRID_SHARE's bounds that makes its tiles nearly as large as the
        most would, or GOOD_TILE_PX (a 12 × 12 grid wants height; a small one leaves the views
        theirs), and READABLE_TILE_PX where the width allows them. The same model again leaves
        the splitter where the user put it."""
        sizes = splitter.sizes()
        total = sum(sizes)
        if model == self._model or total <= 0 or len(sizes) != 2:
            return
        self._model = model
        bar = self.height() - self.grid.height()  # the scale's bar above the grid
        least, most = (round(share * total) for share in GRID_SHARE)
        tile = max(1, *self.grid.layout.tile)
        best = self.grid.scale_at_height(most - bar)  # pixels per cell
        readable = min(best, READABLE_TILE_PX / tile)
        enough = min(max(ENOUGH * best, readable), GOOD_TILE_PX / tile)
        height = next(
            h
            for h in (*range(least, most, 8), most)
            if self.grid.scale_at_height(h - bar) >= enough
        )
        splitter.setSizes([total - height, height])
