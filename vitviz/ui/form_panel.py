"""A settings panel that fits: groups of form rows with the rarely changed ones folded away, in a
column that scrolls vertically only and is never narrower than its widest row."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, QSize, Qt
from PySide6.QtWidgets import (
    QFormLayout,
    QGroupBox,
    QLayout,
    QScrollArea,
    QSizePolicy,
    QToolButton,
    QWidget,
)


class FoldingGroup(QGroupBox):
    """A titled form. Rows added with ``more=True`` sit below a "More settings" toggle and are
    hidden until it is pressed; the label column stays aligned across both."""

    def __init__(self, title: str, parent: QWidget | None = None) -> None:
        super().__init__(title, parent)
        self.form = QFormLayout(self)
        self.form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        self.more_button: QToolButton | None = None
        self._more_rows: list[int] = []
        self._hidden: set[int] = set()  # rows shown to no one now (another model's settings)

    def add_row(self, label: str, field: QWidget | QLayout, more: bool = False) -> None:
        """Append a row; ``more`` rows are folded away until the toggle opens them."""
        if more and self.more_button is None:
            self._add_toggle()
        self.form.addRow(label, field)
        if more:
            row = self.form.rowCount() - 1
            self._more_rows.append(row)
            self._apply(row)

    def show_row(self, field: QWidget, shown: bool) -> None:
        """Show or hide the row of ``field`` (label too); a folded row stays folded."""
        row, _ = self.form.getWidgetPosition(field)
        if row < 0:
            return
        (self._hidden.discard if shown else self._hidden.add)(row)
        self._apply(row)

    def _apply(self, row: int) -> None:
        folded = row in self._more_rows and not self.is_expanded()
        self.form.setRowVisible(row, row not in self._hidden and not folded)

    def is_expanded(self) -> bool:
        return self.more_button is not None and self.more_button.isChecked()

    def set_expanded(self, expanded: bool) -> None:
        if self.more_button is not None:
            self.more_button.setChecked(expanded)

    def _add_toggle(self) -> None:
        button = QToolButton()
        button.setText("More settings")
        button.setCheckable(True)
        button.setAutoRaise(True)
        button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        button.setArrowType(Qt.ArrowType.RightArrow)
        button.toggled.connect(self._on_toggled)
        self.more_button = button
        self.form.addRow(button)

    def _on_toggled(self, expanded: bool) -> None:
        assert self.more_button is not None
        self.more_button.setArrowType(
            Qt.ArrowType.DownArrow if expanded else Qt.ArrowType.RightArrow
        )
        self.more_button.setToolTip("Hide the settings rarely changed" if expanded else "")
        for row in self._more_rows:
            self._apply(row)


class VerticalScrollArea(QScrollArea):
    """Scrolls up and down only: it asks for the width its content needs (plus the scroll bar),
    so a splitter or layout never cuts the content at the right edge."""

    def __init__(self, content: QWidget, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setFrameShape(QScrollArea.Shape.NoFrame)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Expanding)
        self.setWidget(content)
        content.installEventFilter(self)

    def _needed_width(self) -> int:
        content = self.widget()
        inner = content.minimumSizeHint().width() if content is not None else 0
        return inner + self.verticalScrollBar().sizeHint().width() + 2 * self.frameWidth()

    def minimumSizeHint(self) -> QSize:
        return QSize(self._needed_width(), super().minimumSizeHint().height())

    def sizeHint(self) -> QSize:
        return QSize(self._needed_width(), super().sizeHint().height())

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.widget() and event.type() == QEvent.Type.LayoutRequest:
            self.updateGeometry()  # the content's width may have changed (a fold opened)
        return super().eventFilter(watched, event)
