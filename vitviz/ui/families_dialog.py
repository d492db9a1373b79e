"""Help ▸ Supported checkpoints: the families table (``vitviz-cli families``) in the window:
what each family is, what it becomes and the parts it maps onto."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QRect, Qt
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QDialogButtonBox,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

if TYPE_CHECKING:  # the rows come from the checkpoint registry (torch): imported when asked
    from vitviz.checkpoints.families.catalogue import FamilyRow

COLUMNS = ("Family", "Becomes", "What you have", "Forms", "Parts it maps onto")


class FamiliesDialog(QDialog):
    """A read-only table, one row per family, in the order checkpoints are tried."""

    def __init__(self, rows: list[FamilyRow], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Supported checkpoints")
        self.resize(1100, 560)
        intro = QLabel(
            "Each family is converted to one of vitviz's model kinds and checked against the "
            "library that made it (logits within 1e-4, attention within 1e-5); what vitviz "
            "can't reproduce exactly is refused with the reason. Files are tried against the "
            "families in this order. Your own model code opens with File ▸ Open model code."
        )
        intro.setWordWrap(True)
        self.table = QTableWidget(len(rows), len(COLUMNS))
        self.table.setHorizontalHeaderLabels(list(COLUMNS))
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setWordWrap(True)
        self.table.verticalHeader().setVisible(False)
        for r, row in enumerate(rows):
            i = row.info
            cells = (i.label, row.kind, i.names, i.forms, "; ".join(i.parts))
            for c, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(text)
                self.table.setItem(r, c, item)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        for c, width in enumerate((190, 120, 230, 190, 330)):
            self.table.setColumnWidth(c, width)
        header.sectionResized.connect(lambda *_: self._fit_rows())
        self._fit_rows()
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addWidget(self.table, 1)
        layout.addWidget(buttons)

    def _fit_rows(self) -> None:
        """Each row as tall as its longest cell wrapped at its column's width (Qt's own
        size hint for wrapped items overestimates the height of long cells)."""
        metrics = QFontMetrics(self.table.font())
        flags = int(Qt.TextFlag.TextWordWrap)
        for r in range(self.table.rowCount()):
            tallest = 0
            for c in range(self.table.columnCount()):
                width = max(self.table.columnWidth(c) - 10, 20)
                box = metrics.boundingRect(
                    QRect(0, 0, width, 10_000), flags, self.table.item(r, c).text()
                )
                tallest = max(tallest, box.height())
            self.table.setRowHeight(r, tallest + 10)

    def row_texts(self, row: int) -> list[str]:
        """The texts of one table row (tests, screenshots)."""
        return [self.table.item(row, c).text() for c in range(self.table.columnCount())]
