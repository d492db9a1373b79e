"""PaintCounter: counts the paint events of the widgets it watches (tests, latency benchmark)."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject


class PaintCounter(QObject):
    """Install with ``widget.installEventFilter(counter)``; ``counts`` maps widget -> paints."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: dict[QObject, int] = {}

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Paint:
            self.counts[watched] = self.counts.get(watched, 0) + 1
        return False
