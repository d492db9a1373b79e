"""Wheel guard: the mouse wheel changes a combo box, spin box or slider only when it has focus.

Scrolling a panel with the wheel must not change whatever value passes under the pointer. An
unfocused control hands the wheel event on to its parents (so the panel scrolls); a click or Tab
gives it focus, and then the wheel changes its value as usual.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import QAbstractSpinBox, QApplication, QComboBox, QSlider, QWidget

GUARDED = (QComboBox, QAbstractSpinBox, QSlider)
_GUARD_ATTR = "_vitviz_wheel_guard"


class WheelGuard(QObject):
    """Event filter: a wheel event on an unfocused control goes to its parents, not to it."""

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if not isinstance(event, QWheelEvent) or not isinstance(watched, QWidget):
            return False
        if watched.hasFocus():
            return False
        _pass_on(watched, event)
        event.accept()  # handled here (by the ancestors): the control itself never sees it
        return True


def _pass_on(widget: QWidget, event: QWheelEvent) -> None:
    """Offer the wheel to ``widget``'s ancestors, nearest first, until one takes it (a scroll
    area scrolls). Qt propagates only real wheel events, so this does it for any kind."""
    pos = event.position()
    while not widget.isWindow() and widget.parentWidget() is not None:
        pos = widget.mapToParent(pos)
        widget = widget.parentWidget()
        copy = QWheelEvent(
            pos,
            event.globalPosition(),
            event.pixelDelta(),
            event.angleDelta(),
            event.buttons(),
            event.modifiers(),
            event.phase(),
            event.inverted(),
            event.source(),
        )
        copy.ignore()
        QApplication.sendEvent(widget, copy)
        if copy.isAccepted():
            return


def guard_wheel(root: QWidget) -> int:
    """Guard every combo box, spin box and slider below ``root`` (and ``root`` itself if it is
    one): strong focus (click or Tab, never the wheel) and no value change from the wheel while
    unfocused. Safe to call again after adding widgets; returns how many widgets are guarded."""
    guard = getattr(root, _GUARD_ATTR, None)
    if guard is None:
        guard = WheelGuard(root)
        setattr(root, _GUARD_ATTR, guard)
    widgets = [root] if isinstance(root, GUARDED) else []
    widgets += [w for w in root.findChildren(QWidget) if isinstance(w, GUARDED)]
    for widget in widgets:
        widget.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        widget.removeEventFilter(guard)  # installed once, however often this runs
        widget.installEventFilter(guard)
    return len(widgets)
