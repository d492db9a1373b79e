"""TrainingRunner: a training run in its child process, seen from the GUI thread as Qt signals.

The run itself lives in ``vitviz.training`` (spawned process, events through a queue); this
object polls it from a timer, so the window never waits on it, and cancel returns at once.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, QTimer, Signal

from vitviz.training import RunHandle, TrainConfig, start_run

POLL_MS = 100


class TrainingRunner(QObject):
    eventReceived = Signal(object)  # any training event (event.kind says which)
    runFinished = Signal(object)  # the FinishedEvent
    runningChanged = Signal(bool)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.handle: RunHandle | None = None
        self._timer = QTimer(self, interval=POLL_MS)
        self._timer.timeout.connect(self.poll)

    def is_running(self) -> bool:
        return self.handle is not None and self.handle.finished is None

    def start(self, config: TrainConfig) -> RunHandle:
        """Start a run; TrainingConfigError (nothing started) for settings that cannot work."""
        if self.is_running():
            raise RuntimeError("a training run is already in progress")
        self.handle = start_run(config)
        self._timer.start()
        self.runningChanged.emit(True)
        return self.handle

    def cancel(self) -> None:
        """Stop the run now; the last complete checkpoint stays valid."""
        if self.is_running():
            assert self.handle is not None
            self.handle.cancel(wait=False)

    def poll(self) -> None:
        if self.handle is None:
            return
        for event in self.handle.poll():
            self.eventReceived.emit(event)
            if event.kind == "finished":
                self._timer.stop()
                self.runningChanged.emit(False)
                self.runFinished.emit(event)

    def shutdown(self) -> None:
        """At window close: stop a run still going, without waiting on it."""
        if self.is_running():
            assert self.handle is not None
            self.handle.cancel(grace_s=1.0, wait=True)
        self._timer.stop()
