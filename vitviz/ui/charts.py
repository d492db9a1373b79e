"""Predictions bar chart and head-statistics plots (pyqtgraph)."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QObject, Qt, Signal
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import QTabWidget

from vitviz.ui.plot_axes import plain_axes
from vitviz.ui.view_state import PROBABILITY_LABELS, stats_notes

TOP_K = 5
LEGEND_ROW = 4  # of a PlotItem's layout: below the bottom axis (rows 0-3: title, axes, view)


class LegendBelow(pg.LegendItem):
    """A plot's legend in a row of its own under the plot area, so it never covers a point:
    up to ``columns`` entries a row, fewer when the plot is too narrow for them, each as wide
    as its text. Items added to the plot with a ``name`` join it (as with ``addLegend``)."""

    def __init__(self, plot: pg.PlotWidget, columns: int = 3, **style: object) -> None:
        super().__init__(colCount=columns, **style)  # no offset: the layout places it
        self.plot, self.columns = plot, columns
        item = plot.getPlotItem()
        item.layout.addItem(self, LEGEND_ROW, 0, 1, 3, Qt.AlignmentFlag.AlignHCenter)
        item.legend = self
        plot.installEventFilter(self)  # the widget resized: fit the entries again

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Resize:
            self.fit()
        return False

    def addItem(self, item: object, name: str) -> None:
        super().addItem(item, name)
        self.fit()

    def clear(self) -> None:
        super().clear()
        self.fit()

    def fit(self) -> None:
        """As many entries a row as the plot's width takes, and the legend as wide as they."""
        gap = 2 * max(0.0, self.layout.horizontalSpacing())  # after the sample and the text
        widths = [s.width() + label.minimumWidth() + gap for s, label in self.items]
        if not widths:
            return
        left, _, right, _ = self.layout.getContentsMargins()
        n = max(1, min(self.columns, int((self.plot.width() - 8) // max(widths))))
        self.setColumnCount(n)
        rows = range(0, len(widths), n)
        width = max(sum(widths[i : i + n]) for i in rows) + left + right + 2
        self.setMinimumWidth(width)
        self.setMaximumWidth(width)


class PredictionsChart(pg.PlotWidget):
    """Top-k classes as horizontal bars, best on top; click a bar to explain that class."""

    classClicked = Signal(int)

    def __init__(self, parent=None) -> None:
        super().__init__(parent=parent)
        self.setAcceptDrops(False)
        self.setBackground("#fafafa")
        self.setMenuEnabled(False)
        self.setMouseEnabled(False, False)
        self.hideButtons()
        self.getPlotItem().invertY(True)
        self.setLabel("bottom", "probability")
        plain_axes(self)
        self.setXRange(0, 1, padding=0.02)
        self.bars = pg.BarGraphItem(x0=[], y=[], height=0.7, width=[])
        self.addItem(self.bars)
        self.indices: list[int] = []
        self.labels: list[str] = []
        self.probs: list[float] = []
        self.selected: int | None = None
        self.axis_words = "probability"  # the bottom axis's words
        self._ticks_width = -1  # the chart width the names were fitted to
        self.scene().sigMouseClicked.connect(self._on_click)

    def set_predictions(
        self,
        probs: np.ndarray,
        names: list[str],
        selected: int | None,
        k: int = TOP_K,
        scores: str = "logits",
        label: str = "",
    ) -> None:
        """The top ``k`` of ``probs``; ``scores`` (what the model returned) names the axis:
        the softmax of logits, the model's own probabilities, or the exp of its log-probs;
        ``label``, where given, names it instead (a kind's words: "softmax over the prompts")."""
        self.axis_words = label or PROBABILITY_LABELS.get(scores, "probability")
        self.setLabel("bottom", self.axis_words)
        order = np.argsort(-probs, kind="stable")[: min(k, probs.size)]
        self.indices = [int(i) for i in order]
        self.labels = [names[i] for i in self.indices]
        self.probs = [float(probs[i]) for i in self.indices]
        self.set_selected(selected)

    def set_selected(self, selected: int | None) -> None:
        self.selected = selected
        brushes = [pg.mkBrush("#d62728" if i == selected else "#4c72b0") for i in self.indices]
        n = len(self.indices)
        self.bars.setOpts(
            x0=np.zeros(n), y=np.arange(n), height=0.7, width=np.array(self.probs), brushes=brushes
        )
        self._set_ticks()
        self.setYRange(-0.6, max(n, 1) - 0.4, padding=0)

    def _set_ticks(self) -> None:
        """Each bar's name and share; a name cut with "…" where the whole would leave the bars
        too narrow for the axis's words (long prompts in a narrow panel: cut in the middle, so
        prompts that start alike still differ; whole in the tooltip)."""
        fm = QFontMetrics(self.font())
        shares = [f"  {p:.1%}" for p in self.probs]
        room = self.width() - fm.horizontalAdvance(self.axis_words) - 24
        room -= max((fm.horizontalAdvance(t) for t in shares), default=0)
        room = max(room, fm.horizontalAdvance("x" * 8))
        names = [fm.elidedText(n, Qt.TextElideMode.ElideMiddle, room) for n in self.labels]
        ticks = [n + t for n, t in zip(names, shares, strict=True)]
        self.getAxis("left").setTicks([list(enumerate(ticks))])
        whole = zip(self.labels, names, shares, strict=True)
        cut = [n + t for n, e, t in whole if n != e]
        self.setToolTip("\n".join(cut))
        self._ticks_width = self.width()

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        if getattr(self, "labels", None) and self.width() != self._ticks_width:
            self._set_ticks()

    def clear_predictions(self) -> None:
        self.indices, self.labels, self.probs = [], [], []
        self.set_selected(None)

    def _on_click(self, event) -> None:
        if event.button() != Qt.MouseButton.LeftButton or not self.indices:
            return
        p = self.getPlotItem().vb.mapSceneToView(event.scenePos())
        row = round(p.y())
        if 0 <= row < len(self.indices):
            event.accept()
            self.classClicked.emit(self.indices[row])


HEAD_BRUSH = (76, 114, 176, 200)
PREFIX_BRUSH = (214, 39, 40, 220)
PATCH_BRUSH = (76, 114, 176, 90)
MAX_LAYER_TICKS = 24  # more layers: every k-th layer is labelled


def layer_ticks(layers: int) -> list[tuple[int, str]]:
    """Integer ticks 0..L-1, layers counted from 0 (thinned to at most MAX_LAYER_TICKS labels,
    the last always shown)."""
    step = max(1, -(-layers // MAX_LAYER_TICKS))
    shown = sorted({*range(0, layers, step), layers - 1})
    return [(layer, str(layer)) for layer in shown]


class HeadStatsView(QTabWidget):
    """Per-layer dots, one per head: distance (as in the ViT paper), entropy, prefix share in
    percent, and the token norms per layer. Layers count from 0; every plot has its legend."""

    SERIES = (  # key, tab (short: four fit a laptop's side panel), y-axis label, unit, legend
        ("distance", "Distance", "mean attention distance", "px", "one dot per head"),
        ("entropy", "Entropy", "attention entropy", "nats", "one dot per head"),
        ("prefix", "Prefix", "attention to prefix tokens", "%", "one dot per head"),
        ("norms", "Norms", "token L2 norm", "", ""),
    )

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.plots: dict[str, pg.PlotWidget] = {}
        self.legends: dict[str, pg.LegendItem] = {}
        self.notes: dict[str, str | None] = {}  # per plot why it is empty (None: it is not)
        self.texts: dict[str, pg.TextItem] = {}  # those words, inside the plot
        for key, title, label, unit, _ in self.SERIES:
            plot = pg.PlotWidget()
            plot.setAcceptDrops(False)
            plot.setBackground("#fafafa")
            plot.setMenuEnabled(False)
            plot.setLabel("bottom", "layer")
            plot.setLabel("left", label, units=unit or None)
            plain_axes(plot)  # no "layer (x0.001)": values as they are
            plot.showGrid(x=True, y=True, alpha=0.2)
            self.legends[key] = LegendBelow(plot, 2, labelTextColor="#333333")
            self.plots[key] = plot
            self.addTab(plot, title)
            self.setTabToolTip(self.count() - 1, label[0].upper() + label[1:] + " by layer")

    def set_statistics(
        self,
        distance: np.ndarray,
        entropy: np.ndarray,
        prefix: np.ndarray,
        norms: np.ndarray,
        num_prefix: int,
        row_names: list[str] | None = None,
        axis: str = "layer",
        notes: dict[str, str | None] | None = None,
    ) -> None:
        """(L, H) statistics (prefix share as a fraction) and (L, N) token norms; ``row_names``
        (e.g. "0.1" for a Swin's blocks) label the rows instead of layer numbers, ``axis`` names
        them ("block (stage.block)"). A plot without points says why inside it (``notes``, by
        default ``view_state.stats_notes`` of these numbers); the others fit their points."""
        if notes is None:
            notes = stats_notes(distance, entropy, prefix, norms, num_prefix)
        self.notes = dict(notes)
        legends = {key: legend for key, *_, legend in self.SERIES}
        for key, values in (
            ("distance", distance),
            ("entropy", entropy),
            ("prefix", 100.0 * np.asarray(prefix)),
        ):
            L, H = values.shape
            x = np.repeat(np.arange(L), H) + np.tile(np.linspace(-0.15, 0.15, H), L)
            y = values.reshape(-1)
            shown = np.isfinite(y)  # NaN: a head a layer lacks, or no statistic
            plot = self._reset(key, L, row_names, axis)
            if self._explain(key, L):
                continue
            dots = pg.ScatterPlotItem(
                x=x[shown], y=y[shown], size=7, brush=pg.mkBrush(*HEAD_BRUSH), pen=None
            )
            plot.addItem(dots)
            self.legends[key].addItem(dots, f"{legends[key]} ({H} heads)")
        L, N = norms.shape
        plot = self._reset("norms", L, row_names, axis)
        if self._explain("norms", L):
            return
        x = np.repeat(np.arange(L), N) + np.tile(np.linspace(-0.3, 0.3, N), L)
        is_prefix = np.tile(np.arange(N) < num_prefix, L)
        values = norms.reshape(-1)
        for mask, brush, name in (
            (~is_prefix, PATCH_BRUSH, "patch tokens"),
            (is_prefix, PREFIX_BRUSH, "prefix tokens (CLS, registers…)"),
        ):
            if mask.any():
                dots = pg.ScatterPlotItem(
                    x=x[mask], y=values[mask], size=5, brush=pg.mkBrush(*brush), pen=None
                )
                plot.addItem(dots)
                self.legends["norms"].addItem(dots, name)

    def _explain(self, key: str, layers: int) -> bool:
        """Write why the plot ``key`` is empty inside it (on a fixed range: nothing of another
        model's axes stays); False when it has points to show."""
        note = self.notes.get(key)
        if not note:
            return False
        plot = self.plots[key]
        plot.setYRange(0.0, 1.0, padding=0)
        plot.getAxis("left").setTicks([[]])  # no numbers on an axis with nothing to read
        text = pg.TextItem(note, color="#555555", anchor=(0.5, 0.5))
        text.setTextWidth(max(160, int(plot.width() * 0.8)))
        text.setPos((layers - 1) / 2, 0.5)
        plot.addItem(text)
        self.texts[key] = text
        return True

    def _reset(
        self, key: str, layers: int, names: list[str] | None = None, axis: str = "layer"
    ) -> pg.PlotWidget:
        plot = self.plots[key]
        plot.clear()
        self.texts.pop(key, None)
        plot.getAxis("left").setTicks(None)  # the values' own ticks again
        plot.enableAutoRange(axis="y", enable=True)  # the new points' range, not the last
        self.legends[key].clear()
        ticks = layer_ticks(layers)
        if names is not None:  # e.g. a Swin's blocks, "stage.block"
            step = max(1, -(-layers // (MAX_LAYER_TICKS // 2)))  # wider labels: half as many
            ticks = [(i, names[i]) for i in range(0, layers, step)]
        plot.getAxis("bottom").setTicks([ticks])
        plot.setLabel("bottom", axis)
        plot.setXRange(-0.5, layers - 0.5, padding=0.02)
        return plot
