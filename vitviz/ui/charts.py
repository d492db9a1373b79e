"""Predictions bar chart and head-statistics plots (pyqtgraph)."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QTabWidget

TOP_K = 5


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
        self.setXRange(0, 1, padding=0.02)
        self.bars = pg.BarGraphItem(x0=[], y=[], height=0.7, width=[])
        self.addItem(self.bars)
        self.indices: list[int] = []
        self.labels: list[str] = []
        self.probs: list[float] = []
        self.selected: int | None = None
        self.scene().sigMouseClicked.connect(self._on_click)

    def set_predictions(
        self, probs: np.ndarray, names: list[str], selected: int | None, k: int = TOP_K
    ) -> None:
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
        ticks = [
            (i, f"{name}  {p:.1%}")
            for i, (name, p) in enumerate(zip(self.labels, self.probs, strict=True))
        ]
        self.getAxis("left").setTicks([ticks])
        self.setYRange(-0.6, max(n, 1) - 0.4, padding=0)

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


class HeadStatsView(QTabWidget):
    """Per-layer dots, one per head: distance (as in the ViT paper), entropy, prefix share,
    and the token norms per layer."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.plots: dict[str, pg.PlotWidget] = {}
        for key, title, unit in (
            ("distance", "Distance", "mean attention distance (px)"),
            ("entropy", "Entropy", "entropy (nats)"),
            ("prefix", "Prefix share", "attention to prefix tokens"),
            ("norms", "Token norms", "token L2 norm"),
        ):
            plot = pg.PlotWidget()
            plot.setAcceptDrops(False)
            plot.setBackground("#fafafa")
            plot.setMenuEnabled(False)
            plot.setLabel("bottom", "layer")
            plot.setLabel("left", unit)
            plot.showGrid(x=True, y=True, alpha=0.2)
            self.plots[key] = plot
            self.addTab(plot, title)

    def set_statistics(
        self,
        distance: np.ndarray,
        entropy: np.ndarray,
        prefix: np.ndarray,
        norms: np.ndarray,
        num_prefix: int,
    ) -> None:
        """(L, H) statistics and (L, N) token norms."""
        for key, values in (("distance", distance), ("entropy", entropy), ("prefix", prefix)):
            L, H = values.shape
            x = np.repeat(np.arange(1, L + 1), H) + np.tile(np.linspace(-0.15, 0.15, H), L)
            plot = self.plots[key]
            plot.clear()
            plot.addItem(
                pg.ScatterPlotItem(
                    x=x, y=values.reshape(-1), size=7, brush=pg.mkBrush(76, 114, 176, 200), pen=None
                )
            )
        plot = self.plots["norms"]
        plot.clear()
        L, N = norms.shape
        x = np.repeat(np.arange(1, L + 1), N) + np.tile(np.linspace(-0.3, 0.3, N), L)
        colours = [
            pg.mkBrush(214, 39, 40, 220) if j < num_prefix else pg.mkBrush(76, 114, 176, 90)
            for _ in range(L)
            for j in range(N)
        ]
        plot.addItem(pg.ScatterPlotItem(x=x, y=norms.reshape(-1), size=5, brush=colours, pen=None))
