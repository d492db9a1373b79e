"""Does a window fit its screen? Helpers for the layout tests: text a widget can't show in full,
widgets outside the window, and a wheel turned over a widget."""

from __future__ import annotations

import math

from PySide6 import QtGui
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QTextDocument, QWheelEvent
from PySide6.QtWidgets import (
    QAbstractButton,
    QApplication,
    QCheckBox,
    QComboBox,
    QLabel,
    QPushButton,
    QWidget,
)

COMBO_CHROME = 28  # the arrow and frame of a combo box, in pixels, besides its text


def shown_on_screen(widget: QWidget, window: QWidget) -> bool:
    """Visible, with some of it inside the window (not hidden behind a closed tab or a fold)."""
    if not widget.isVisibleTo(window) or not widget.isVisible():
        return False
    return widget.width() > 0 and widget.height() > 0


def text_needs(widget: QWidget) -> int | None:
    """Pixels the widget's text needs to be read in full (None: nothing to check)."""
    fm = widget.fontMetrics()
    if isinstance(widget, QLabel):
        if widget.wordWrap() or not widget.text():
            return None
        if widget.pixmap() is not None and not widget.pixmap().isNull():
            return None
        margins = widget.contentsMargins()
        fmt, text = widget.textFormat(), widget.text()
        rich = fmt == Qt.TextFormat.RichText or (
            fmt == Qt.TextFormat.AutoText and QtGui.Qt.mightBeRichText(text)  # (QtGui's Qt has it)
        )
        if rich:
            doc = QTextDocument()
            doc.setDefaultFont(widget.font())
            doc.setDocumentMargin(0)
            doc.setHtml(widget.text())
            width = math.ceil(doc.idealWidth())
        else:
            width = max(fm.horizontalAdvance(line) for line in widget.text().split("\n"))
        return width + margins.left() + margins.right() + 2 * widget.margin() + widget.indent()
    if isinstance(widget, (QPushButton, QCheckBox)):
        return widget.minimumSizeHint().width() if widget.text() else None
    if isinstance(widget, QComboBox):
        text = widget.currentText()
        return fm.horizontalAdvance(text) + COMBO_CHROME if text else None
    return None


def clipped_widgets(window: QWidget) -> list[str]:
    """Every visible label, button, check box or combo whose text is cut: 'Class "text" w<need'."""
    found = []
    kinds = (QLabel, QAbstractButton, QComboBox)
    for widget in window.findChildren(QWidget):
        if not isinstance(widget, kinds) or not shown_on_screen(widget, window):
            continue
        need = text_needs(widget)
        if need is not None and widget.width() + 1 < need:
            text = widget.currentText() if isinstance(widget, QComboBox) else widget.text()
            found.append(f"{type(widget).__name__} {text!r}: {widget.width()} px < {need} px")
    return found


def inside_window(widget: QWidget, window: QWidget) -> bool:
    """The whole widget lies inside the window's rectangle (nothing cut off at its edges)."""
    top_left = widget.mapTo(window, QPoint(0, 0))
    rect = widget.rect().translated(top_left)
    return window.rect().contains(rect)


def turn_wheel(widget: QWidget, steps: int = 1) -> None:
    """Send a mouse-wheel event of ``steps`` notches to ``widget`` (as the pointer over it)."""
    centre = QPointF(widget.width() / 2, widget.height() / 2)
    event = QWheelEvent(
        centre,
        widget.mapToGlobal(centre),
        QPoint(0, 0),
        QPoint(0, 120 * steps),
        Qt.MouseButton.NoButton,
        Qt.KeyboardModifier.NoModifier,
        Qt.ScrollPhase.NoScrollPhase,
        False,
    )
    QApplication.sendEvent(widget, event)
