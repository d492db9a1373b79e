"""File ▸ Compare with… (DESIGN §5): the current model (A) and a second checkpoint (B) on the
same image, side by side: each one's large map of one method and query, kept in sync (a
click on either makes that patch the query of both), a difference mode A − B on a diverging
scale, both predictions and the head similarity of their query attention. Results come from
the engine (``vitviz.workers.compare_jobs``); nothing here touches torch."""

from __future__ import annotations

from functools import partial

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QStandardItemModel
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from vitviz.imaging.colormaps import nice_levels
from vitviz.ui.canvas import ImageCanvas
from vitviz.ui.colors import make_colorbar, set_colorbar_levels
from vitviz.ui.knockout import knocked_words
from vitviz.ui.plot_axes import plain_axes
from vitviz.ui.view_state import nearest_runnable
from vitviz.workers import compare_jobs
from vitviz.workers.engine import EngineClient
from vitviz.workers.messages import CompareResult, ImageResult, MethodInfo

# blue (A < B) through white to red (A > B)
DIVERGING = pg.ColorMap([0.0, 0.5, 1.0], [(59, 76, 192), (245, 245, 245), (180, 4, 38)])


def no_difference(a: np.ndarray | None, b: np.ndarray | None) -> str:
    """Why there is no A − B for these maps (``difference`` gave None), in words."""
    if a is None or b is None:
        missing = " and ".join(who for who, m in (("A", a), ("B", b)) if m is None)
        return f"No A − B map: {missing} made no map here."
    if a.ndim != 2 or b.ndim != 2:
        return "No A − B map: the maps are colours, not values."
    cells_a, cells_b = ("×".join(str(n) for n in m.shape) for m in (a, b))
    return f"No A − B map: A's map is {cells_a} cells, B's {cells_b} (other grids)."


def difference(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
    """A − B where both are maps of one grid (None otherwise: colours, or other grids)."""
    if a is None or b is None or a.ndim != 2 or a.shape != b.shape:
        return None
    return (a.astype(np.float64) - b.astype(np.float64)).astype(np.float32)


MAX_HEAD_TICKS = 6  # head numbers under the narrow grid at most (a Swin's 24 heads: every 4th)
MAX_ROW_TICKS = 16  # layer numbers beside it at most


def every(count: int, most: int) -> list[tuple[int, str]]:
    """Ticks 0, s, 2s, … below ``count``, with the step s that gives at most ``most``."""
    step = max(1, -(-count // most))
    return [(i, str(i)) for i in range(0, count, step)]


SHARED_SCALE = "A and B: one scale"  # along both maps' colour bars
OWN_SCALE = "{who}'s own scale"  # … or along each, when each map has its own
SAME_MAPS = "A − B is 0 on every patch: both models give this map the same values."
DIFF_SCALE = "A − B (red: A higher, blue: B higher)"  # along the difference's colour bar


def shared_levels(*maps: np.ndarray | None) -> tuple[float, float] | None:
    """One colour scale for the (h, w) maps given (None or colours left out): ``nice_levels``
    of all their finite values together, so equal colours mean equal values across the maps;
    None when no map has a finite value."""
    finite = [m[np.isfinite(m)] for m in maps if m is not None and m.ndim == 2]
    values = np.concatenate([f.ravel() for f in finite]) if finite else np.empty(0)
    return nice_levels(values) if values.size else None


def default_words(method: MethodInfo | None) -> str:
    """What settings both maps are made with (the method's defaults: the compare window has no
    controls for them), e.g. "Both at the method's defaults: Layer: the last layer · Head: the
    mean of the heads"; "" for a method without settings."""
    if method is None or not method.parameters:
        return ""
    said = []
    for p in method.parameters:
        value = p.default
        head, _, rest = p.help.partition(": ")
        words = rest if rest and head == str(value) else str(value)  # "-1: the last layer"
        said.append(f"{p.label}: {words}")
    return "Both at the method's defaults: " + " · ".join(said)


def top_words(name: str, top: list[tuple[str, float]]) -> str:
    if not top:
        return f"{name}: no classification head"
    return f"{name}: " + " · ".join(f"{c} {p:.1%}" for c, p in top)


class CompareWindow(QWidget):
    """Two models side by side on the viewer's image."""

    def __init__(self, client: EngineClient, parent: QWidget | None = None) -> None:
        super().__init__(parent, Qt.WindowType.Window)
        self.setWindowTitle("vitviz · compare two models")
        self.client = client
        self.image: ImageResult | None = None
        self.result: CompareResult | None = None
        self.query: tuple[int, int] | None = None
        self.methods: list[MethodInfo] = []
        self.wanted: str | None = None  # the user's method: shown again where A can run it
        self.method = QComboBox()
        self.diff = QCheckBox("Difference A − B")
        self.one_scale = QCheckBox("One colour scale")
        self.one_scale.setChecked(True)
        self.one_scale.setToolTip(
            "On: A and B on one colour scale (a colour is one value in both maps). Off: each map "
            "on its own scale (shows the structure of a map whose values are much smaller)"
        )
        self.query_label = QLabel("")  # each side's query in its own model's words
        reset = QPushButton("Reset query")
        top = QHBoxLayout()
        top.addWidget(QLabel("Method"))
        top.addWidget(self.method)
        top.addWidget(self.one_scale)
        top.addWidget(self.diff)
        top.addWidget(self.query_label)
        top.addWidget(reset)
        top.addStretch(1)
        self.view_a = ImageCanvas("A")
        self.view_b = ImageCanvas("B")
        self.view_diff = ImageCanvas("A − B")
        self.view_diff.hide()
        self.heads = pg.PlotWidget()
        self.heads.setBackground("w")
        self.heads.setMenuEnabled(False)
        self.heads.setLabel("left", "layer")
        self.heads.setLabel("bottom", "head")
        plain_axes(self.heads)  # one column (heads averaged) would read "head (x0.001)"
        self.heads.getViewBox().invertY(True)
        self.heads_image = pg.ImageItem(axisOrder="row-major")
        self.heads.addItem(self.heads_image)
        # its scale beside it, 0 to 1, as the other grids' colour bars (it sets the colours)
        self.heads_bar = make_colorbar(self.heads_image, "viridis")
        self.heads_bar.setImageItem(self.heads_image, insert_in=self.heads.getPlotItem())
        set_colorbar_levels(self.heads_bar, (0.0, 1.0), label="head similarity")
        self.heads.setMinimumWidth(220)
        views = QSplitter(Qt.Orientation.Horizontal)
        for w in (self.view_a, self.view_b, self.view_diff, self.heads):
            views.addWidget(w)
        self.views = views
        self.heads_title = QLabel("")
        self.pred_a, self.pred_b, self.status = QLabel(""), QLabel(""), QLabel("")
        for label in (self.pred_a, self.pred_b, self.status, self.heads_title):
            label.setWordWrap(True)
        self.settings_label = QLabel("")  # the method's settings both maps are made with
        self.settings_label.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.settings_label)
        layout.addWidget(views, 1)
        layout.addWidget(self.heads_title)
        layout.addWidget(self.pred_a)
        layout.addWidget(self.pred_b)
        layout.addWidget(self.status)
        self.method.currentIndexChanged.connect(self._method_chosen)
        self.diff.toggled.connect(self._draw)
        self.one_scale.toggled.connect(self._draw)
        reset.clicked.connect(lambda: self.set_query(None))
        for v in (self.view_a, self.view_b, self.view_diff):
            v.patchClicked.connect(lambda r, c: self.set_query((r, c)))

    def set_methods(self, methods: list[MethodInfo], shown: str | None) -> None:
        self.methods, self.wanted = list(methods), shown
        self.method.blockSignals(True)
        self.method.clear()
        for m in methods:
            self.method.addItem(m.label, m.name)
        index = self.method.findData(shown) if shown else -1
        self.method.setCurrentIndex(max(index, 0))
        self.method.blockSignals(False)
        if self.image is not None:
            self._offer()

    def _method_chosen(self, _index: int) -> None:
        self.wanted = self.method.currentData()
        self.request()

    def refusals(self) -> dict[str, str]:
        """{method: why} for each method model A (the viewer's) or model B can't run, the
        reason naming the model (B's known from its last result)."""
        a = {} if self.image is None else self.image.unavailable
        b = {} if self.result is None else self.result.refused_b
        name_b = "" if self.result is None else f" ({self.result.name_b})"
        said: dict[str, list[str]] = {}
        for who, refused in (("Model A", a), (f"Model B{name_b}", b)):
            for name, why in refused.items():
                said.setdefault(name, []).append(f"{who}: {why}")
        return {name: "\n".join(lines) for name, lines in said.items()}

    def _offer(self) -> bool:
        """The methods model A or model B can't run greyed with their reasons, and the user's
        method shown where both run it, else the nearest both run (DESIGN §6); True when the
        method shown changed."""
        model = self.method.model()
        if not isinstance(model, QStandardItemModel):
            return False
        unavailable = self.refusals()
        for i in range(self.method.count()):
            item, why = model.item(i), unavailable.get(self.method.itemData(i))
            if item is not None:
                item.setEnabled(why is None)
                item.setToolTip(why or "")
        if self.wanted is None or not self.methods:
            return False
        index = self.method.findData(nearest_runnable(self.wanted, self.methods, unavailable))
        if index < 0 or index == self.method.currentIndex():
            return False
        blocked = self.method.blockSignals(True)
        self.method.setCurrentIndex(index)
        self.method.blockSignals(blocked)
        return True

    def apply_image(self, result: ImageResult) -> None:
        if self.image is None or self.image.grid != result.grid:
            self.query = None
        self.image = result
        self._offer()
        for v in (self.view_a, self.view_b, self.view_diff):
            v.set_image(result.display, result.region, tuple(result.grid))
            v.set_query(self.query)
        self.request()

    def set_query(self, patch: tuple[int, int] | None) -> None:
        self.query = patch
        for v in (self.view_a, self.view_b, self.view_diff):
            v.set_query(patch)
        self.request()

    def request(self) -> int | None:
        if self.image is None or self.method.currentData() is None:
            return None
        shown = next((m for m in self.methods if m.name == self.method.currentData()), None)
        self.settings_label.setText(default_words(shown))
        self.settings_label.setVisible(bool(self.settings_label.text()))
        job = partial(compare_jobs.compare_view, method=self.method.currentData(), query=self.query)
        return self.client.submit("compare", job)

    def apply_compare(self, result: CompareResult) -> None:
        self.result = result
        if self._offer():  # model B can't run the method shown: the nearest both run instead
            self.request()
        self._draw()
        self.query_label.setText(self.query_words(result))
        self.pred_a.setText(top_words(f"A {result.name_a}", result.top_a))
        self.pred_b.setText(top_words(f"B {result.name_b}", result.top_b))
        sim = result.head_similarity
        self.heads_image.setImage(sim, autoLevels=False, levels=(0.0, 1.0))
        rows, cols = sim.shape
        self.heads_image.setRect(QRectF(-0.5, -0.5, cols, rows))  # cell (l, h) on (h, l)
        self.heads.getAxis("left").setTicks([every(rows, MAX_ROW_TICKS)])
        self.heads.getAxis("bottom").setTicks(
            [every(cols, MAX_HEAD_TICKS) if cols > 1 else [(0, "mean")]]
        )
        self.heads.setXRange(-0.5, cols - 0.5, padding=0.02)
        self.heads.setYRange(-0.5, rows - 0.5, padding=0.02)
        per = "per layer and head" if sim.shape[1] > 1 else "per layer (heads averaged)"
        self.heads_title.setText(
            f"Head similarity of the query attention, {per} (0 to 1): mean {np.nanmean(sim):.3f}"
        )
        self.status.setText(result.error)

    def method_label(self, name: str) -> str:
        """The label of method ``name`` (the name itself where the table lacks it)."""
        return next((m.label for m in self.methods if m.name == name), name)

    def query_words(self, r: CompareResult) -> str:
        """The query both maps of ``r`` are of, each side in its own kind's words (a ViT's
        "CLS token", one without it "mean of patches", a Swin's "average pool …"): "query A:
        CLS token · B: mean of patches", or "query A and B: …" where they say the same."""
        sides = (
            (None, None, r.query)
            if self.image is None
            else (self.image.words, self.image.token_geometry, r.query),
            (r.words_b, r.geometry_b, r.query_b),
        )
        said = [
            "" if words is None or geometry is None else words.query_text(query, geometry)
            for words, geometry, query in sides
        ]
        if said[0] == said[1]:
            return f"query A and B: {said[0]}" if said[0] else ""
        named = zip(("query A", "B"), said, strict=True)
        return " · ".join(f"{who}: {text}" for who, text in named if text)

    def view_title(self, who: str, r: CompareResult) -> str:
        """What one side shows, from its result: "A · head 0.1 knocked out (zero ablation) ·
        model · Attention rollout · cat.jpg" (what was knocked out of the model and how, first:
        nothing else in this window says it, and a narrow view's title loses its last parts;
        the model, method, image)."""
        name = r.name_a if who == "A" else r.name_b
        knocked = knocked_words(r.knocked_a, r.ablation_a) if who == "A" else ""
        parts = [who, knocked, name, self.method_label(r.method), r.image_label]
        return " · ".join(p for p in parts if p)

    def failed(self, message: str) -> None:
        self.status.setText(message)

    def _draw(self) -> None:
        r = self.result
        if r is None:
            return
        # one scale for both maps (a colour means one value in A and B) or each its own, said
        # along the bars
        if self.one_scale.isChecked():
            levels = shared_levels(r.map_a, r.map_b)
            self.view_a.set_map(r.map_a, levels, opacity=0.6, scale_label=SHARED_SCALE)
            self.view_b.set_map(r.map_b, levels, opacity=0.6, scale_label=SHARED_SCALE)
        else:
            for view, values, who in ((self.view_a, r.map_a, "A"), (self.view_b, r.map_b, "B")):
                own = OWN_SCALE.format(who=who)
                view.set_map(values, shared_levels(values), opacity=0.6, scale_label=own)
        self.view_a.set_title(self.view_title("A", r))
        self.view_b.set_title(self.view_title("B", r))
        self.view_diff.set_title(f"A − B · {self.method_label(r.method)} · {r.image_label}")
        grid = None if self.image is None else tuple(self.image.grid)
        for view, values, error, who in ((self.view_a, r.map_a, r.errors[0], "A"),
                                         (self.view_b, r.map_b, r.errors[1], "B")):  # fmt: skip
            # a map without its reason would be a blank view: the reason in it, naming the model
            view.set_message(f"No map from {who}: {error}" if values is None and error else None)
            # the grid's lines are model A's patches: on a map of another grid they would lie
            other = values is not None and values.ndim == 2 and tuple(values.shape) != grid
            view.set_grid_visible(not other)
        shown = self.diff.isChecked()
        if shown != self.view_diff.isVisible():
            self.view_diff.setVisible(shown)
            width = max(sum(self.views.sizes()), 4)
            parts = (1, 1, 1, 0.7) if shown else (1, 1, 0, 0.7)
            self.views.setSizes([int(width * p / sum(parts)) for p in parts])
        d = difference(r.map_a, r.map_b)
        if shown:
            if d is None:
                self.view_diff.set_map(None)
                self.view_diff.set_message(no_difference(r.map_a, r.map_b))
            elif (gap := np.abs(d[np.isfinite(d)])).size and gap.max() == 0:  # the same maps
                self.view_diff.set_map(None)
                self.view_diff.set_message(SAME_MAPS)
            else:
                top = float(gap.max()) if gap.size else 1.0
                self.view_diff.overlay.setColorMap(DIVERGING)
                if self.view_diff.colorbar is not None:
                    self.view_diff.colorbar.setColorMap(DIVERGING)
                    self.view_diff._cmap_name = "diverging"
                self.view_diff.set_map(d, (-top, top), opacity=0.8, scale_label=DIFF_SCALE)
                self.view_diff.set_message(None)
