"""Does a window fit its screen? Helpers for the layout tests: text a widget can't show in full
(labels, buttons, tabs, colour bars' numbers, plot legends), widgets outside the window, and a
wheel turned over a widget."""

from __future__ import annotations

import math

import pyqtgraph as pg
from PySide6 import QtGui
from PySide6.QtCore import QPoint, QPointF, QRectF, Qt
from PySide6.QtGui import QFont, QFontMetricsF, QImage, QPainter, QTextDocument, QWheelEvent
from PySide6.QtWidgets import (
    QAbstractButton,
    QApplication,
    QCheckBox,
    QComboBox,
    QGraphicsItem,
    QGraphicsView,
    QLabel,
    QPushButton,
    QTabBar,
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


def clipped_tabs(window: QWidget) -> list[str]:
    """Every visible tab bar whose tabs don't all show their whole text: 'QTabBar "text"'.
    A bar that needs its scroll arrows, or elides a text, counts."""
    found = []
    for bar in window.findChildren(QTabBar):
        if not shown_on_screen(bar, window):
            continue
        fm = bar.fontMetrics()
        for i in range(bar.count()):
            rect = bar.tabRect(i)
            if fm.horizontalAdvance(bar.tabText(i)) + 2 > rect.width() or not bar.rect().contains(
                rect
            ):
                found.append(f"QTabBar {bar.tabText(i)!r}: {rect.width()} px in {bar.width()} px")
    return found


def _scene_rect_in_view(item: QGraphicsItem, rect: QRectF, view: QGraphicsView) -> QRectF:
    """``rect`` (in ``item``'s coordinates) in pixels of ``view``'s viewport."""
    return view.mapFromScene(item.mapRectToScene(rect)).boundingRect().toRectF()


def axis_labels(axis: pg.AxisItem, view: QGraphicsView) -> list[tuple[str, QRectF]]:
    """The tick labels ``axis`` draws (overlapping ones it hides are left out), each with its
    rectangle in ``view``'s viewport pixels."""
    image = QImage(8, 8, QImage.Format.Format_ARGB32)
    painter = QPainter(image)
    try:
        specs = axis.generateDrawSpecs(painter)
    finally:
        painter.end()
    if specs is None:
        return []
    _axis, _ticks, texts = specs
    return [(text, _scene_rect_in_view(axis, rect, view)) for rect, _flags, text in texts]


def colorbar_problems(colorbar: pg.ColorBarItem, view: QGraphicsView) -> list[str]:
    """What keeps a colour bar's scale from being read: an end of its range without a label,
    or a label cut by the edge of the view or wider than the room beside the bar."""
    lo, hi = colorbar.levels()
    labels = axis_labels(colorbar.axis, view)
    texts = [text for text, _ in labels]
    found = []
    ticks = dict(colorbar.axis._tickLevels[0]) if colorbar.axis._tickLevels else {}
    for end in (lo, hi):
        if ticks.get(end) not in texts:
            found.append(f"no label at {end:g} (shown: {texts})")
    viewport = QRectF(view.viewport().rect())
    fm = QFontMetricsF(colorbar.axis.style.get("tickFont") or QFont())
    for text, rect in labels:
        if not viewport.contains(rect):
            found.append(f"label {text!r} at {rect.getRect()} cut by the view {viewport.getRect()}")
        if fm.horizontalAdvance(text) > rect.width() + 0.5:
            found.append(f"label {text!r} wider than its room ({rect.width():.0f} px)")
    return found


def legend_problems(plot: pg.PlotWidget) -> list[str]:
    """What makes a plot's legend hard to read: lying over the plot area (it can cover a point),
    reaching out of the widget, or a label wider than the legend."""
    item = plot.getPlotItem()
    legend = item.legend
    if legend is None or not legend.isVisible():
        return ["no legend"]
    view_px = _scene_rect_in_view(item.vb, item.vb.boundingRect(), plot)
    legend_px = _scene_rect_in_view(legend, legend.boundingRect(), plot)
    found = []
    if legend_px.intersects(view_px.adjusted(1, 1, -1, -1)):
        found.append(f"legend {legend_px.getRect()} over the plot area {view_px.getRect()}")
    if not QRectF(plot.viewport().rect()).adjusted(-0.5, -0.5, 0.5, 0.5).contains(legend_px):
        found.append(f"legend {legend_px.getRect()} out of the widget {plot.viewport().rect()}")
    for _sample, label in legend.items:
        text_px = _scene_rect_in_view(label, label.boundingRect(), plot)
        if not legend_px.adjusted(-0.5, -0.5, 0.5, 0.5).contains(text_px):
            found.append(f"legend text {label.text!r} cut")
    return found
