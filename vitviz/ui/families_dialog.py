"""Help ▸ Supported checkpoints: the families table (``vitviz-cli families``) in the window:
what each family is, what it becomes and the parts it maps onto."""

from __future__ import annotations

from typing import TYPE_CHECKING

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
        for c in range(len(COLUMNS) - 1):
            header.setSectionResizeMode(c, QHeaderView.ResizeMode.Interactive)
        header.setSectionResizeMode(len(COLUMNS) - 1, QHeaderView.ResizeMode.Stretch)
        for c, width in enumerate((190, 120, 230, 190)):
            self.table.setColumnWidth(c, width)
        self.table.resizeRowsToContents()
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addWidget(self.table, 1)
        layout.addWidget(buttons)

    def row_texts(self, row: int) -> list[str]:
        """The texts of one table row (tests, screenshots)."""
        return [self.table.item(row, c).text() for c in range(self.table.columnCount())]
