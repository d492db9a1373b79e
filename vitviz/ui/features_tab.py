"""The Features view (DESIGN §5): what the tokens carry on the current image. The PCA of the
final tokens as colours over the photo, the similarity of every patch to the query (the CLS,
or the clicked patch) after the chosen block, the token norms of that block with the
high-norm tokens outlined and the prefix and register tokens' norms listed, and the logit
lens (the top classes' probability after each block). Results come from
the engine (``vitviz.workers.feature_jobs``); nothing here touches torch."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import numpy as np
from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QPen
from PySide6.QtWidgets import (
    QDoubleSpinBox,
    QGraphicsRectItem,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSpinBox,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from vitviz.ui.canvas import ImageCanvas
from vitviz.ui.logit_lens_chart import LogitLensChart
from vitviz.workers import feature_jobs
from vitviz.workers.engine import EngineClient
from vitviz.workers.messages import FeaturesResult, ImageResult

LAST = -1  # the block spin box's "last" (its special value)
HIGH_PEN = QColor(255, 0, 255)  # magenta: the query's box is red


def prefix_words(norms: np.ndarray) -> str:
    """The prefix and register tokens' norms in words ("0 (CLS) 51.2 · 1 80.4 …")."""
    if norms.size == 0:
        return "No prefix or register tokens: the model has none."
    parts = [f"{i}{' (CLS)' if i == 0 else ''} {v:.4g}" for i, v in enumerate(norms.tolist())]
    return "Prefix and register tokens' norms: " + " · ".join(parts)


def with_query(result: FeaturesResult, patch: tuple[int, int] | None) -> FeaturesResult | None:
    """``result`` with ``patch``'s similarity, the row of its table for that cell (a click
    the window answers without the engine); None without a table or a patch, or off its grid."""
    cells, table = result.cells, result.table
    if patch is None or cells is None or table is None:
        return None
    row, col = patch
    if not (0 <= row < cells.shape[0] and 0 <= col < cells.shape[1]):
        return None
    return replace(result, query=patch, similarity=table[int(cells[row, col])])


class FeaturesTab(QWidget):
    """Three views over the photo (PCA, similarity, token norm) and their controls."""

    def __init__(self, client: EngineClient, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.client = client
        self.image: ImageResult | None = None
        self.result: FeaturesResult | None = None
        self.query: tuple[int, int] | None = None
        self.showing = True  # the tab is the one shown (the window says); hidden, nothing is
        # asked of the engine until it shows (``set_showing``)
        self._stale = False  # a request waits for the tab to show
        self._outlines: list[QGraphicsRectItem] = []

        self.block = QSpinBox()
        self.block.setRange(LAST, 0)
        self.block.setSpecialValueText("last")
        self.block.setValue(LAST)
        self.block.setToolTip("the block whose output tokens the similarity and norms read")
        self.foreground = QDoubleSpinBox()
        self.foreground.setRange(0.0, 0.95)
        self.foreground.setSingleStep(0.05)
        self.foreground.setSpecialValueText("off")
        self.foreground.setToolTip(
            "PCA foreground: keep the patches whose first component (0..1) is above this, "
            "fit again on them, background black"
        )
        self.opacity = QSpinBox()
        self.opacity.setRange(10, 100)
        self.opacity.setSingleStep(10)
        self.opacity.setSuffix(" %")
        self.opacity.setValue(75)
        self.opacity.setToolTip("how much the maps cover the photo")
        self.query_label = QLabel("query: CLS")
        self.query_reset = QPushButton("Reset query")
        controls = QHBoxLayout()
        controls.addWidget(QLabel("Block"))
        controls.addWidget(self.block)
        controls.addSpacing(12)
        controls.addWidget(QLabel("PCA foreground"))
        controls.addWidget(self.foreground)
        controls.addSpacing(12)
        controls.addWidget(QLabel("Opacity"))
        controls.addWidget(self.opacity)
        controls.addSpacing(12)
        controls.addWidget(self.query_label)
        controls.addWidget(self.query_reset)
        controls.addStretch(1)

        self.pca_view = ImageCanvas("PCA of the final tokens (first 3 components as RGB)",
                                    colorbar=False)  # fmt: skip
        self.similarity_view = ImageCanvas("Similarity to the query · click a patch")
        self.norm_view = ImageCanvas("Token norm · high-norm tokens outlined")
        views = QSplitter(Qt.Orientation.Horizontal)
        for v in (self.pca_view, self.similarity_view, self.norm_view):
            views.addWidget(v)
        self.views = views
        self.prefix_label = QLabel("")
        self.prefix_label.setWordWrap(True)
        self.status = QLabel("Open an image and a checkpoint to see what its tokens carry.")
        self.status.setWordWrap(True)
        self.logit_lens = LogitLensChart()  # the top classes by depth (DESIGN §5)
        self.logit_lens.setMinimumHeight(150)
        body = QSplitter(Qt.Orientation.Vertical)
        body.addWidget(views)
        body.addWidget(self.logit_lens)
        body.setStretchFactor(0, 3)
        body.setStretchFactor(1, 1)
        layout = QVBoxLayout(self)
        layout.addLayout(controls)
        layout.addWidget(body, 1)
        layout.addWidget(self.prefix_label)
        layout.addWidget(self.status)

        self.block.valueChanged.connect(lambda _v: self.request())
        self.foreground.valueChanged.connect(lambda _v: self.request())
        self.query_reset.clicked.connect(lambda: self.set_query(None))
        self.opacity.valueChanged.connect(lambda _v: self._draw())
        for v in (self.pca_view, self.similarity_view, self.norm_view):
            v.patchClicked.connect(lambda r, c: self.set_query((r, c)))

    # -- from the window ------------------------------------------------------------------------
    def apply_image(self, result: ImageResult) -> None:
        """A new analysis: the photo under each view, then its features asked for."""
        old = self.image
        if old is None or old.grid != result.grid:
            self.query = None
        self.image = result
        self.result = None  # the old image's: drawn until the new one's come, never looked up
        for v in (self.pca_view, self.similarity_view, self.norm_view):
            v.set_image(result.display, result.region, tuple(result.grid))
            v.set_query(self.query)
        self.request()

    def set_showing(self, showing: bool) -> None:
        """The window shows the tab (or another): shown, what waited is asked for now."""
        self.showing = showing
        if showing and self._stale:
            self.request()

    def _say_query(self) -> None:
        """The query in words; without a click, the token the shown block's result took (the
        CLS where the block has prefix tokens, else the mean patch token)."""
        if self.query is not None:
            said = f"patch row {self.query[0]}, col {self.query[1]}"
        elif self.result is None or self.result.query is not None:  # not known yet
            said = "CLS (or the mean token)"
        else:
            said = "the CLS token" if self.result.prefix_norms.size else "the mean patch token"
        self.query_label.setText(f"query: {said}")

    def request(self) -> int | None:
        """The features for the current block, query and foreground, from the engine; while
        the tab is hidden, asked when it shows (one job then, not one per image)."""
        if self.image is None:
            return None
        self._say_query()
        self._stale = not self.showing
        if self._stale:
            return None
        job = partial(
            feature_jobs.features,
            layer=self.block.value(),
            query=self.query,
            foreground=float(self.foreground.value()),
        )
        return self.client.submit("features", job)

    def set_query(self, patch: tuple[int, int] | None) -> None:
        """``patch`` the query: its similarity looked up in the shown result's table (a
        click needs no engine job), else asked of the engine."""
        self.query = patch
        for v in (self.pca_view, self.similarity_view, self.norm_view):
            v.set_query(patch)
        r = self.result  # the current image's (a new image forgets it)
        looked_up = None
        if r is not None and not self._stale and r.asked_layer == self.block.value():
            looked_up = with_query(r, patch)
        if looked_up is None:
            self.request()
            return
        self._say_query()
        self.apply_features(looked_up)

    def apply_features(self, result: FeaturesResult) -> None:
        """Draw ``result``; what the engine handed back unchanged (the same arrays: a click
        changes only the similarity) is not drawn again."""
        if result.query != self.query:  # asked before a click the window answered itself
            result = with_query(result, self.query) or result
        old, self.result = self.result, result
        if self.block.maximum() != result.blocks - 1:
            self.block.blockSignals(True)
            self.block.setRange(LAST, result.blocks - 1)
            self.block.blockSignals(False)
        self._draw(old)
        block = f"block {result.layer} of 0–{result.blocks - 1}"
        self.similarity_view.set_title(f"Similarity to the query · {block} · click a patch")
        high = int(result.high.sum())
        self.norm_view.set_title(f"Token norm · {block} · {high} high-norm outlined")
        if old is None or old.high is not result.high:
            self._outline(result.high)
        self.prefix_label.setText(prefix_words(result.prefix_norms))
        self._say_query()  # the token it took, now known
        if old is None or old.logit_lens is not result.logit_lens:
            self.logit_lens.set_lens(result.logit_lens, result.class_names)
        said = f"{high} high-norm token{'s' if high != 1 else ''} (norm > median + 4 · MAD)"
        self.status.setText("  ".join(t for t in (said, result.note) if t))

    def _draw(self, old: FeaturesResult | None = None) -> None:
        """The maps over the photo at the chosen opacity; with ``old`` (the result shown
        before, at this opacity) only those whose arrays changed."""
        r = self.result
        if r is None:
            return
        opacity = self.opacity.value() / 100.0
        if old is None or old.pca is not r.pca:
            self.pca_view.set_map(r.pca, (0.0, 1.0), opacity=opacity)
            # a kind that refuses PCA: the view blank, saying why (DESIGN §5)
            self.pca_view.set_message(
                f"No PCA on this model: {r.pca_note}" if r.pca is None and r.pca_note else None
            )
        self.similarity_view.set_map(r.similarity, opacity=opacity)
        if old is None or old.norms is not r.norms:
            self.norm_view.set_map(r.norms, opacity=opacity)

    def failed(self, message: str) -> None:
        self.status.setText(message)
        self.result = None  # the next result is drawn whole
        self.logit_lens.set_lens(None, [], why="")  # the status line says why

    def _outline(self, high: np.ndarray) -> None:
        """A red box around each high-norm token of the norm map's grid."""
        for item in self._outlines:
            self.norm_view.vb.removeItem(item)
        self._outlines = []
        left, top, right, bottom = self.norm_view.region
        h, w = high.shape
        cw, ch = (right - left) / w, (bottom - top) / h
        pen = QPen(HIGH_PEN)
        pen.setCosmetic(True)
        pen.setWidthF(3.0)
        for r, c in zip(*np.nonzero(high), strict=True):
            item = QGraphicsRectItem(QRectF(left + c * cw, top + r * ch, cw, ch))
            item.setPen(pen)
            item.setZValue(28)
            self.norm_view.vb.addItem(item)
            self._outlines.append(item)
