"""A wrapped label of a steady height: ``lines`` lines tall, taller only while its text needs
more at its width (a kind's long query words in a narrow side panel), so a new text of as many
lines never lays the panel out again and no text is cut (DESIGN §6). Its height is its own: it
answers no height-for-width, and the same text set again changes nothing."""

from __future__ import annotations

from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QLabel, QWidget


class LinesLabel(QLabel):
    """A word-wrapped QLabel whose fixed height is max(``lines``, the lines its text needs)."""

    def __init__(
        self, text: str = "", lines: int = 2, pad: int = 4, parent: QWidget | None = None
    ) -> None:
        super().__init__(text, parent)
        self.lines, self.pad = lines, pad  # ``pad`` pixels beside the lines' own height
        self.setWordWrap(True)
        self._fit()

    def hasHeightForWidth(self) -> bool:
        return False  # its height is its own (``_fit``): the layout never asks it again

    def setText(self, text: str) -> None:
        if text == self.text():
            return  # the same words: no new layout (a wrapped label's would move the panel)
        super().setText(text)
        self._fit()

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._fit()

    def _fit(self) -> None:
        least = self.lines * self.fontMetrics().lineSpacing() + self.pad
        height = max(least, self.heightForWidth(self.width()))
        if self.height() != height or self.minimumHeight() != height:
            self.setFixedHeight(height)
