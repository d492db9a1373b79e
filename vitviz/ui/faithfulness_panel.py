"""The Faithfulness panel: deletion and insertion curves of the shown method against ``random``
on the current image, with their AUCs (and the localisation numbers when a mask is beside it)."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from vitviz.workers.messages import CurvesResult, FaithfulnessResult

BASELINE = "random"
COLORS = {"method": "#d62728", "random": "#777777"}
PENS = {
    "method": pg.mkPen(COLORS["method"], width=2),
    "random": pg.mkPen(COLORS["random"], width=2, dash=[4, 3]),
}


class CurvePlot(pg.PlotWidget):
    """One kind of curve (deletion or insertion): p_k against the share of patches changed."""

    def __init__(self, title: str, parent: QWidget | None = None) -> None:
        super().__init__(parent=parent)
        self.setAcceptDrops(False)
        self.setBackground("#fafafa")
        self.setMenuEnabled(False)
        self.setMouseEnabled(False, False)
        self.hideButtons()
        self.setTitle(title, size="9pt")
        self.setLabel("bottom", "share of patches")
        self.setLabel("left", "p(class)")
        self.setXRange(0, 1, padding=0.02)
        self.setYRange(0, 1, padding=0.02)
        self.setMinimumHeight(150)
        self.curves: dict[str, pg.PlotDataItem] = {}  # the table below is the key

    def show_curves(self, curves: dict[str, tuple[np.ndarray, str]]) -> None:
        """{role: (p_0 … p_S, its name)}; role "method" or "random"."""
        for item in self.curves.values():
            self.removeItem(item)
        self.curves = {}
        for role, (values, text) in curves.items():
            x = np.linspace(0.0, 1.0, len(values))
            self.curves[role] = self.plot(x, values, pen=PENS[role], name=text)


class FaithfulnessPanel(QWidget):
    """A button asks for the numbers (``measureRequested``); ``show_result`` draws them."""

    measureRequested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.result: FaithfulnessResult | None = None
        self.measure = QPushButton("Measure faithfulness")
        self.measure.setToolTip(
            "Deletion and insertion curves of the shown method and of a random map for this "
            "image's top class (CLS query; on a Swin the average pool): patches removed or "
            "restored best first"
        )
        self.measure.clicked.connect(self.measureRequested)
        self.status = QLabel("Not measured yet.")
        self.status.setWordWrap(True)
        self.deletion = CurvePlot("Deletion (lower AUC is better)")
        self.insertion = CurvePlot("Insertion (higher AUC is better)")
        self.numbers = QLabel("")
        self.numbers.setTextFormat(Qt.TextFormat.RichText)
        self.numbers.setWordWrap(True)
        top = QHBoxLayout()
        top.addWidget(self.measure)
        top.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(top)
        layout.addWidget(self.status)
        layout.addWidget(self.deletion, 1)
        layout.addWidget(self.insertion, 1)
        layout.addWidget(self.numbers)

    def set_busy(self, text: str) -> None:
        self.status.setText(text)
        self.measure.setEnabled(False)

    def set_idle(self, text: str | None = None) -> None:
        if text is not None:
            self.status.setText(text)
        self.measure.setEnabled(True)

    def clear(self, text: str = "Not measured yet.") -> None:
        self.result = None
        self.deletion.show_curves({})
        self.insertion.show_curves({})
        self.numbers.setText("")
        self.set_idle(text)

    def show_result(self, result: FaithfulnessResult, method_label: str, class_name: str) -> None:
        self.result = result
        shown, base = result.curves[result.method], result.curves.get(BASELINE)
        for plot, kind, better in (
            (self.deletion, "deletion", "lower"),
            (self.insertion, "insertion", "higher"),
        ):
            curves = {"method": self._curve(shown, kind, method_label)}
            title = f"{kind.capitalize()} AUC {getattr(shown, kind + '_auc'):.3f}"
            if base is not None and result.method != BASELINE:
                curves["random"] = self._curve(base, kind, "Random")
                title += f" · random {getattr(base, kind + '_auc'):.3f}"
            plot.show_curves(curves)
            plot.setTitle(title, size="9pt")
            plot.setToolTip(f"{kind}: {better} AUC is better")
        rows = [("method", method_label, shown)]
        if base is not None and result.method != BASELINE:
            rows.append(("random", "Random", base))
        self.numbers.setText(self._table(rows, result.has_mask))
        self.set_idle(
            f"{result.label}: class “{class_name}”, {result.steps} steps "
            f"({'with' if result.has_mask else 'no'} object mask)."
        )

    @staticmethod
    def _curve(c: CurvesResult, kind: str, label: str) -> tuple[np.ndarray, str]:
        values = np.asarray(c.deletion if kind == "deletion" else c.insertion, dtype=np.float64)
        return values, label

    @staticmethod
    def _table(rows: list[tuple[str, str, CurvesResult]], has_mask: bool) -> str:
        head = (
            "<tr><th align=left>map</th><th>del.&nbsp;AUC&nbsp;↓</th><th>ins.&nbsp;AUC&nbsp;↑</th>"
        )
        if has_mask:
            head += "<th>in&nbsp;mask</th><th>pointing</th>"
        lines = [head + "</tr>"]
        for role, label, c in rows:
            key = f"<span style='color:{COLORS[role]}'>{'━' if role == 'method' else '╍'}</span>"
            cells = (
                f"<td>{key} {label}</td><td align=center>{c.deletion_auc:.3f}</td>"
                f"<td align=center>{c.insertion_auc:.3f}</td>"
            )
            if has_mask:
                mass = "–" if c.mass_in_mask is None else f"{c.mass_in_mask:.1%}"
                hit = "–" if c.pointing_hit is None else ("hit" if c.pointing_hit else "miss")
                cells += f"<td align=center>{mass}</td><td align=center>{hit}</td>"
            lines.append(f"<tr>{cells}</tr>")
        return "<table cellspacing=4>" + "".join(lines) + "</table>"
