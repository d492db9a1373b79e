""" "Open from cache": pick a checkpoint already on this disk (Hugging Face / torch hub caches)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QDialogButtonBox,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from vitviz.core.printable import byte_size


class CacheDialog(QDialog):
    """Lists cache entries (objects with label, path, size, family, source); nothing downloads."""

    def __init__(self, entries: list, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Open from cache")
        self.resize(760, 380)
        self.entries = list(entries)
        self.table = QTableWidget(len(self.entries), 4)
        self.table.setHorizontalHeaderLabels(["Checkpoint", "Family (guess)", "Size", "Cache"])
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        for row, e in enumerate(self.entries):
            cells = (e.label, e.family, byte_size(e.size, step=1024), e.source)
            for col, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(str(e.path))
                if col == 2:
                    item.setTextAlignment(
                        Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
                    )
                self.table.setItem(row, col, item)
        self.table.resizeColumnsToContents()
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.doubleClicked.connect(self.accept)
        if self.entries:
            self.table.selectRow(0)
        note = QLabel(
            "Checkpoints already on this disk in the Hugging Face hub cache and the torch hub "
            "cache. Nothing is downloaded."
            if self.entries
            else "No checkpoints were found in the Hugging Face or torch hub caches on this disk."
        )
        note.setWordWrap(True)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Open | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.button(QDialogButtonBox.StandardButton.Open).setEnabled(bool(self.entries))
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(note)
        layout.addWidget(self.table, 1)
        layout.addWidget(buttons)

    def selected_path(self) -> Path | None:
        rows = self.table.selectionModel().selectedRows()
        if not rows:
            return None
        return Path(self.entries[rows[0].row()].path)
