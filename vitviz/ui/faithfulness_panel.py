"""The Faithfulness panel: deletion and insertion curves of the shown method against ``random``
on the current image, with their AUCs (and the localisation numbers when a mask is beside it),
or averaged over a folder of images (here or on a Ray cluster, with progress and Cancel)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from vitviz.ui import file_dialogs
from vitviz.ui.cluster_row import ClusterRow, FolderRunsOn
from vitviz.ui.plot_axes import plain_axes
from vitviz.ui.settings import AppSettings
from vitviz.ui.view_state import NO_CLASSES
from vitviz.workers.folder_faithfulness import FolderFaithfulnessResult
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
        self.title = title  # shown again when the plot is emptied
        self.setTitle(title, size="9pt")
        self.setLabel("bottom", "share of patches")
        self.setLabel("left", "p(class)")
        plain_axes(self)
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


MEASURE_TIP = (
    "Deletion and insertion curves of the shown method and of a random map for this image's "
    "top class (CLS query; on a Swin the average pool): patches removed or restored best first"
)
FOLDER_TIP = (
    "The same curves averaged over every image of a folder (each image's own top class; its "
    "<stem>_mask.png beside it for the localisation numbers)"
)


class FaithfulnessPanel(FolderRunsOn, QWidget):
    """A button asks for the numbers (``measureRequested``); ``show_result`` draws them.
    ``folderRequested(folder)`` asks for them over a folder's images, ``cancelRequested``
    stops that run; the window answers with ``set_progress``, ``show_folder`` or
    ``set_folder_idle``."""

    measureRequested = Signal()
    folderRequested = Signal(object)  # Path of a folder of images
    cancelRequested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.result: FaithfulnessResult | None = None
        self.has_classes = True  # the model on screen has classes to measure (``offer``)
        self.measure = QPushButton("Measure faithfulness")
        self.measure.setToolTip(MEASURE_TIP)
        self.measure.clicked.connect(self.measureRequested)
        self.folder_result: FolderFaithfulnessResult | None = None
        self.running = False
        self._app_settings: AppSettings | None = None
        self.over_folder = QPushButton("Over a folder…")
        self.over_folder.setToolTip(FOLDER_TIP)
        self.over_folder.clicked.connect(self._choose_folder)
        self.back = QPushButton("This image")
        self.back.setToolTip("Show this image's curves again")
        self.back.hide()
        self.back.clicked.connect(self.show_image)
        self.progress = QProgressBar()
        self.progress.hide()
        self.cancel = QPushButton("Cancel")
        self.cancel.hide()
        self.cancel.clicked.connect(self.cancelRequested)
        self.cluster_row = ClusterRow()  # this computer, or a Ray cluster (the settings')
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
        folder = QHBoxLayout()
        folder.addWidget(self.over_folder)
        folder.addWidget(self.back)
        folder.addWidget(self.progress, 1)
        folder.addWidget(self.cancel)
        folder.addStretch(0)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(top)
        layout.addLayout(folder)
        layout.addWidget(self.cluster_row)
        layout.addWidget(self.status)
        layout.addWidget(self.deletion, 1)
        layout.addWidget(self.insertion, 1)
        layout.addWidget(self.numbers)

    def offer(self, has_classes: bool) -> None:
        """The curves follow a class: a model without classes greys both buttons with the
        reason (DESIGN §6)."""
        self.has_classes = has_classes
        for button, tip in ((self.measure, MEASURE_TIP), (self.over_folder, FOLDER_TIP)):
            button.setToolTip(tip if has_classes else f"Faithfulness {NO_CLASSES}")
        self.measure.setEnabled(has_classes and not self.running)
        self.over_folder.setEnabled(has_classes and not self.running)

    def set_busy(self, text: str) -> None:
        self.status.setText(text)
        self.measure.setEnabled(False)

    def set_idle(self, text: str | None = None) -> None:
        if text is not None:
            self.status.setText(text)
        self.measure.setEnabled(self.has_classes and not self.running)

    def clear(self, text: str = "Not measured yet.") -> None:
        self.result = None
        if self.running or self.folder_result is not None:
            return  # a folder's curves (or its run) stay until "This image"
        self._draw({}, "", 0)
        self.set_idle(text)

    def show_result(self, result: FaithfulnessResult, method_label: str, class_name: str) -> None:
        self.result = result
        if self.folder_result is not None:
            self.folder_result = None
            self.back.hide()
        self._draw(result.curves, result.method, result.has_mask, method_label)
        self.set_idle(
            f"{result.label}: class “{class_name}”, {result.steps} steps "
            f"({'with' if result.has_mask else 'no'} object mask)."
        )

    def show_image(self) -> None:
        """Back from a folder's curves to this image's (measured again on request)."""
        self.folder_result = None
        self.back.hide()
        self.clear()

    # -- a folder --------------------------------------------------------------------------------
    def _choose_folder(self) -> None:
        title = "Faithfulness over a folder of images"
        folder = file_dialogs.open_folder(self, self.app_settings, "images", title)
        if folder:
            self.folderRequested.emit(Path(folder))

    def set_running(self, folder: Path, method_label: str) -> None:
        self.running = True
        self.over_folder.setEnabled(False)
        self.measure.setEnabled(False)
        self.cluster_row.setEnabled(False)
        self.progress.setRange(0, 0)  # until the first image is done
        self.progress.setFormat("%v / %m images")
        self.progress.show()
        self.cancel.show()
        address = self.cluster_address()
        where = f" on the cluster at {address}" if address else ""
        self.status.setText(f"Measuring {method_label} on the images of {folder}{where}…")

    def set_progress(self, done: int, total: int) -> None:
        self.progress.setRange(0, total)
        self.progress.setValue(done)

    def set_folder_idle(self, message: str | None = None) -> None:
        """The folder's run ended without a result (cancelled or failed): say so."""
        self.running = False
        self.over_folder.setEnabled(self.has_classes)
        self.cluster_row.setEnabled(True)
        self.progress.hide()
        self.cancel.hide()
        self.set_idle(message)

    def show_folder(self, result: FolderFaithfulnessResult, method_label: str) -> None:
        """The folder's mean curves of the method and of random, with the mean AUCs."""
        self.set_folder_idle()
        self.result = None
        self.folder_result = result
        self._draw(result.curves, result.method, result.masked > 0, method_label,
                   pointing=result.pointing)  # fmt: skip
        skipped = f"; {len(result.failed)} could not be measured" if result.failed else ""
        where = f", on the cluster at {result.on_cluster}" if result.on_cluster else ""
        masks = f", {result.masked} with an object mask" if result.masked else ""
        self.status.setText(
            f"Mean over {result.images} images of {result.folder.name} ({result.checkpoint}), "
            f"each image's top class, {result.steps} steps{masks}{where}{skipped}."
        )
        self.back.show()

    # -- drawing ---------------------------------------------------------------------------------
    def _draw(
        self,
        all_curves: dict[str, CurvesResult],
        method: str,
        has_mask: bool,
        method_label: str = "",
        pointing: dict[str, float] | None = None,
    ) -> None:
        """The method's curves against random's in both plots, and the table of numbers
        (``pointing``: a folder's hit rates; None: this image's hit or miss)."""
        if method not in all_curves:
            for plot in (self.deletion, self.insertion):
                plot.show_curves({})
                plot.setTitle(plot.title, size="9pt")
            self.numbers.setText("")
            return
        shown, base = all_curves[method], all_curves.get(BASELINE)
        for plot, kind, better in (
            (self.deletion, "deletion", "lower"),
            (self.insertion, "insertion", "higher"),
        ):
            curves = {"method": self._curve(shown, kind, method_label)}
            title = f"{kind.capitalize()} AUC {getattr(shown, kind + '_auc'):.3f}"
            if base is not None and method != BASELINE:
                curves["random"] = self._curve(base, kind, "Random")
                title += f" · random {getattr(base, kind + '_auc'):.3f}"
            plot.show_curves(curves)
            plot.setTitle(title, size="9pt")
            plot.setToolTip(f"{kind}: {better} AUC is better")
        rows = [("method", method_label, shown, (pointing or {}).get(method))]
        if base is not None and method != BASELINE:
            rows.append(("random", "Random", base, (pointing or {}).get(BASELINE)))
        self.numbers.setText(self._table(rows, has_mask))

    @staticmethod
    def _curve(c: CurvesResult, kind: str, label: str) -> tuple[np.ndarray, str]:
        values = np.asarray(c.deletion if kind == "deletion" else c.insertion, dtype=np.float64)
        return values, label

    @staticmethod
    def _table(rows: list[tuple[str, str, CurvesResult, float | None]], has_mask: bool) -> str:
        """The numbers' table; a row's last entry: a folder's pointing hit rate (None: the
        image's own hit or miss)."""
        head = (
            "<tr><th align=left>map</th><th>del.&nbsp;AUC&nbsp;↓</th><th>ins.&nbsp;AUC&nbsp;↑</th>"
        )
        if has_mask:
            head += "<th>in&nbsp;mask</th><th>pointing</th>"
        lines = [head + "</tr>"]
        for role, label, c, rate in rows:
            key = f"<span style='color:{COLORS[role]}'>{'━' if role == 'method' else '╍'}</span>"
            cells = (
                f"<td>{key} {label}</td><td align=center>{c.deletion_auc:.3f}</td>"
                f"<td align=center>{c.insertion_auc:.3f}</td>"
            )
            if has_mask:
                mass = "–" if c.mass_in_mask is None else f"{c.mass_in_mask:.1%}"
                hit = "–" if c.pointing_hit is None else ("hit" if c.pointing_hit else "miss")
                hit = hit if rate is None else f"{rate:.0%} hits"
                cells += f"<td align=center>{mass}</td><td align=center>{hit}</td>"
            lines.append(f"<tr>{cells}</tr>")
        return "<table cellspacing=4>" + "".join(lines) + "</table>"
