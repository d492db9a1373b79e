"""Model ▸ Download a model…: the ViTs people study (``checkpoints/hub_models.json``) and a box
for any model id, downloaded from the Hugging Face Hub into its cache (``workers.download``).

It asks before downloading (the files and their size, read from the hub's listing), shows the
progress with Cancel, resumes what a cancelled or broken download left, and asks the window to
open the model when it is there (``openRequested``). A model already in the cache opens at once.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from vitviz.core.printable import byte_size
from vitviz.workers.download import DownloadRunner

if TYPE_CHECKING:  # the rows come from vitviz.checkpoints (torch): imported when asked
    from vitviz.checkpoints.hub_catalogue import CuratedModel

COLUMNS = ("Model", "Hub id", "Size", "Trained on", "Licence", "Here")
CACHED_MARK = "✓ cached"


class DownloadDialog(QDialog):
    """The list, the id box, one status line, a progress bar and the buttons. States: browsing,
    reading the listing, asking, downloading, cancelled, done, failed (``state``)."""

    openRequested = Signal(object, str)  # what opens (a snapshot folder or file), the model id

    def __init__(
        self,
        models: list[CuratedModel],
        as_of: str,
        where: str,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Download a model")
        self.resize(1040, 560)
        self.models = list(models)
        self.state = "browsing"
        self.plan: Any = None  # hub_fetch.DownloadPlan being asked about or fetched
        self.runner = DownloadRunner(self)
        self.runner.planned.connect(self._ask)
        self.runner.cached.connect(self._open_cached)
        self.runner.progress.connect(self._progress)
        self.runner.finished.connect(self._done)
        self.runner.cancelled.connect(self._cancelled)
        self.runner.failed.connect(self._failed)

        intro = QLabel(
            f"Vision Transformers from the Hugging Face Hub, downloaded into {where} (where "
            "timm, transformers and open_clip look too). Only what vitviz reads is fetched. "
            f"Sizes, training data and licences as the hub stated them on {as_of}; the exact "
            "size is read from the hub before anything downloads."
        )
        intro.setWordWrap(True)
        self.table = QTableWidget(len(self.models), len(COLUMNS))
        self.table.setHorizontalHeaderLabels(list(COLUMNS))
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        self.fill_rows()
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(3, QHeaderView.ResizeMode.Stretch)
        self.table.itemSelectionChanged.connect(self._selected)
        self.table.doubleClicked.connect(lambda _index: self.start())

        self.id_box = QLineEdit()
        self.id_box.setPlaceholderText("org/name or org/name@revision, e.g. facebook/dinov2-small")
        self.id_box.returnPressed.connect(self.start)
        self.id_box.textEdited.connect(lambda _text: self._typed())
        id_row = QHBoxLayout()
        id_row.addWidget(QLabel("Any model id:"))
        id_row.addWidget(self.id_box, 1)

        self.status = QLabel("Pick a model or type an id.")
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.bar = QProgressBar()
        self.bar.setRange(0, 1000)
        self.bar.setFormat("%p%")
        self.bar.hide()

        self.go_button = QPushButton("Download…")
        self.go_button.setDefault(True)
        self.go_button.clicked.connect(self.start)
        self.back_button = QPushButton("Back")
        self.back_button.clicked.connect(self.back)
        self.back_button.hide()
        self.cancel_button = QPushButton("Cancel download")
        self.cancel_button.clicked.connect(self.cancel)
        self.cancel_button.hide()
        self.close_button = QPushButton("Close")
        self.close_button.clicked.connect(self.reject)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        for b in (self.back_button, self.cancel_button, self.go_button, self.close_button):
            buttons.addWidget(b)

        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addWidget(self.table, 1)
        layout.addLayout(id_row)
        layout.addWidget(self.status)
        layout.addWidget(self.bar)
        layout.addLayout(buttons)
        if self.models:
            self.table.selectRow(0)

    # -- the list -----------------------------------------------------------------------------
    def fill_rows(self) -> None:
        """The table's cells; a model in the cache is marked (and opens at once)."""
        for r, m in enumerate(self.models):
            here = CACHED_MARK if m.cached() is not None else ""
            cells = (m.label, m.repo_id, byte_size(m.size_mb * 1e6), m.trained_on, m.licence, here)
            for c, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(text)
                if c == 2:
                    item.setTextAlignment(
                        Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
                    )
                self.table.setItem(r, c, item)

    def chosen_id(self) -> str:
        """The id typed, else the selected row's."""
        typed = self.id_box.text().strip()
        if typed:
            return typed
        rows = self.table.selectionModel().selectedRows()
        return self.models[rows[0].row()].repo_id if rows else ""

    def _selected(self) -> None:
        if self.state not in ("browsing", "cancelled", "done", "failed"):
            return
        if self.table.selectionModel().selectedRows():
            self.id_box.clear()
        self._browse()

    def _typed(self) -> None:
        if self.state in ("browsing", "cancelled", "done", "failed"):
            self._browse()

    def _browse(self) -> None:
        self.state = "browsing"
        rows = self.table.selectionModel().selectedRows()
        cached = (
            not self.id_box.text().strip()
            and bool(rows)
            and self.table.item(rows[0].row(), 5).text() == CACHED_MARK
        )
        self.go_button.setText("Open" if cached else "Download…")
        self._show_buttons(go=True)

    # -- the steps ------------------------------------------------------------------------------
    def start(self) -> None:
        """Download… / Open: read what the chosen id needs (or open it when it's cached);
        Download (when asking): fetch the files."""
        if self.runner.is_running():
            if self.state in ("cancelled", "done", "failed"):  # its thread is still winding down
                QTimer.singleShot(20, self.start)  # the click is taken once it has ended
            return
        if self.state == "asking":
            self._fetch()
            return
        text = self.chosen_id()
        self.state = "reading"
        self.status.setText(f"Reading the file list of {text} …")
        self._show_buttons()
        self.runner.plan(text)

    def _ask(self, plan: Any) -> None:
        self.plan, self.state = plan, "asking"
        files = plan.choice.files
        names = ", ".join(f.name for f in files)
        have = plan.have_bytes()
        kept = f"; {byte_size(have)} of it already here (resumed)" if have else ""
        self.status.setText(
            f"{plan.shown}: {len(files)} file{'s' * (len(files) != 1)} ({names}), "
            f"{byte_size(plan.choice.total)}{kept}. Download into {plan.folder.parent}?"
        )
        self.go_button.setText("Download")
        self._show_buttons(go=True, back=True)

    def _fetch(self) -> None:
        self.state = "downloading"
        self.bar.setValue(0)
        self.bar.show()
        self._show_buttons(cancel=True)
        self.status.setText(f"Downloading {self.plan.shown} …")
        self.runner.fetch(self.plan)

    def _progress(self, done: int, total: int) -> None:
        self.bar.setValue(round(1000 * done / total) if total else 1000)
        self.status.setText(
            f"Downloading {self.plan.shown}: {byte_size(done)} of {byte_size(total)}"
        )

    def cancel(self) -> None:
        self.runner.cancel()

    def back(self) -> None:
        self.plan = None
        self.status.setText("Pick a model or type an id.")
        self._browse()

    def _cancelled(self) -> None:
        self.state = "cancelled"
        self.bar.hide()
        have = self.plan.have_bytes() if self.plan is not None else 0
        self.status.setText(
            f"Cancelled: {byte_size(have)} of {self.plan.shown} kept; Download… resumes it."
        )
        self.go_button.setText("Download…")
        self._show_buttons(go=True)

    def _done(self, path: Path) -> None:
        self.state = "done"
        self.bar.setValue(1000)
        shown = self.plan.shown
        self.status.setText(f"{shown} is downloaded into {self.plan.folder}; opening it.")
        self.fill_rows()
        self._show_buttons()
        self.openRequested.emit(path, shown)

    def _open_cached(self, path: Path) -> None:
        text = self.chosen_id()
        self.state = "done"
        self.status.setText(f"{text} is in the cache: opening it.")
        self._show_buttons()
        self.openRequested.emit(path, text)
        self.accept()

    def _failed(self, message: str) -> None:
        self.state = "failed"
        self.bar.hide()
        self.status.setText(message)
        self.go_button.setText("Download…")
        self._show_buttons(go=True)

    def _show_buttons(self, go: bool = False, back: bool = False, cancel: bool = False) -> None:
        self.go_button.setVisible(go)
        self.back_button.setVisible(back)
        self.cancel_button.setVisible(cancel)

    def reject(self) -> None:
        """Close: a download under way is cancelled first (what it fetched stays)."""
        self.runner.cancel()
        self.runner.wait(5.0)
        super().reject()
