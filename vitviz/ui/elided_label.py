"""A one-line label that gives way first when its row is short of room: below its text's width
it shows the text cut at the end with "…", the whole text in its tooltip (the status bar's
intervention line beside the model line, DESIGN §6)."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QPainter, QPaintEvent, QResizeEvent
from PySide6.QtWidgets import QFrame, QLabel, QWidget


class ElidedLabel(QLabel):
    """A QLabel whose ``text()`` and size hint stay the whole text, drawn elided to its width;
    ``min_chars`` characters wide at least."""

    def __init__(self, text: str = "", min_chars: int = 16, parent: QWidget | None = None) -> None:
        super().__init__(text, parent)
        self.min_chars = min_chars

    def minimumSizeHint(self) -> QSize:
        hint = super().minimumSizeHint()
        margins = self.contentsMargins()
        least = self.fontMetrics().horizontalAdvance("x" * self.min_chars)
        width = least + margins.left() + margins.right()
        return QSize(min(width, hint.width()), hint.height())

    def setText(self, text: str) -> None:
        super().setText(text)
        self._tip()

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._tip()

    def _shown(self) -> str:
        width = self.contentsRect().width()
        return self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideRight, width)

    def _tip(self) -> None:
        self.setToolTip(self.text() if self._shown() != self.text() else "")

    def paintEvent(self, event: QPaintEvent) -> None:
        QFrame.paintEvent(self, event)  # the style's background and frame
        painter = QPainter(self)
        painter.setPen(self.palette().color(self.foregroundRole()))
        painter.drawText(self.contentsRect(), int(self.alignment()), self._shown())
        painter.end()
