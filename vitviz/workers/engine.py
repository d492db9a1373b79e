"""The engine thread: runs the jobs off the GUI thread, newest request wins, one error path.

The window talks to ``EngineClient`` only. Every request gets an id on its channel ("model",
"image", "maps", "export", "device"); the engine skips a request that a newer one on the same
channel has already superseded, and the client drops results that are no longer the newest.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, QThread, Signal, Slot

from vitviz.workers import jobs
from vitviz.workers.messages import UserError

CHANNELS = (
    "warmup",
    "methods",
    "model",
    "image",
    "maps",
    "export",
    "device",
    "cache",
    "faithfulness",
    "prompts",
    "interventions",
    "features",  # the Features view and the logit lens
    "compare",  # File ▸ Compare with…: the second model and both maps
)


class Engine(QObject):
    """Lives in the engine thread; each slot call runs one job."""

    finished = Signal(int, str, object)  # request id, channel, result
    userError = Signal(int, str, object)  # request id, channel, UserError
    failed = Signal(int, str, str)  # request id, channel, traceback text
    skipped = Signal(int, str)  # request id, channel: superseded, not run
    passes = Signal(int, str, int, int)  # request id, channel, forward passes done, in all

    def __init__(self, latest: dict[str, int]) -> None:
        super().__init__()
        self._latest = latest  # written by the GUI thread; reading an int is atomic
        self.state = jobs.EngineState()

    @Slot(int, str, object)
    def run(self, req_id: int, channel: str, job: Callable[[jobs.EngineState], Any]) -> None:
        if req_id < self._latest.get(channel, 0):
            self.skipped.emit(req_id, channel)  # superseded before it started
            return
        from vitviz.explain.cam_layer import CamCancelledError, reporting

        def report(done: int, total: int) -> None:
            self.passes.emit(req_id, channel, done, total)

        def stale() -> bool:  # a newer request on the channel (or a cancel) stops the passes
            return req_id < self._latest.get(channel, 0)

        try:
            with reporting(report, stale):  # a long method's passes (DESIGN §5)
                result = job(self.state)
        except CamCancelledError:
            self.skipped.emit(req_id, channel)
        except jobs.UserFacingError as exc:
            self.userError.emit(req_id, channel, UserError(str(exc), exc.kind, exc.details))
        except Exception:  # noqa: BLE001 - every bug goes to the one error dialog
            self.failed.emit(req_id, channel, traceback.format_exc())
        else:
            self.finished.emit(req_id, channel, result)


class EngineClient(QObject):
    """GUI-side handle: submit jobs, get only the newest result of each channel back."""

    resultReady = Signal(str, object)  # channel, result
    userError = Signal(str, object)  # channel, UserError
    failed = Signal(str, str)  # channel, traceback text
    busyChanged = Signal(bool)
    passProgress = Signal(str, int, int)  # channel, forward passes done, in all (the newest's)
    _submit = Signal(int, str, object)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._latest: dict[str, int] = dict.fromkeys(CHANNELS, 0)
        self._next_id = 0
        self._pending = 0
        self._thread = QThread()
        self._thread.setObjectName("vitviz-engine")
        self._engine = Engine(self._latest)
        self._engine.moveToThread(self._thread)
        self._submit.connect(self._engine.run)
        self._engine.finished.connect(self._on_finished)
        self._engine.userError.connect(self._on_user_error)
        self._engine.failed.connect(self._on_failed)
        self._engine.skipped.connect(self._settle)
        self._engine.passes.connect(self._on_passes)
        self._thread.start()

    # -- requests -------------------------------------------------------------------------------
    def submit(self, channel: str, job: Callable[[jobs.EngineState], Any]) -> int:
        """Queue ``job`` on ``channel``; it supersedes any older request there."""
        if channel not in self._latest:
            raise ValueError(f"unknown channel {channel!r}")
        self._next_id += 1
        self._latest[channel] = self._next_id
        self._pending += 1
        if self._pending == 1:
            self.busyChanged.emit(True)
        self._submit.emit(self._next_id, channel, job)
        return self._next_id

    def supersede(self, channel: str) -> None:
        """Make every request queued on ``channel`` stale (its newer result came another way)."""
        self._next_id += 1
        self._latest[channel] = self._next_id

    def cancel(self, channel: str) -> None:
        """Stop the request running on ``channel`` at its next batch of forward passes (a
        Score-CAM's, an Ablation-CAM's): it is superseded, its result never comes."""
        self.supersede(channel)

    def is_busy(self) -> bool:
        return self._pending > 0

    def shutdown(self, timeout_ms: int = 5000) -> None:
        self._thread.quit()
        self._thread.wait(timeout_ms)

    # -- results (GUI thread) --------------------------------------------------------------------
    def _settle(self, *_: object) -> None:
        self._pending = max(0, self._pending - 1)
        if self._pending == 0:
            self.busyChanged.emit(False)

    def _current(self, req_id: int, channel: str) -> bool:
        return req_id >= self._latest[channel]

    def _on_passes(self, req_id: int, channel: str, done: int, total: int) -> None:
        if self._current(req_id, channel):
            self.passProgress.emit(channel, done, total)

    def _on_finished(self, req_id: int, channel: str, result: object) -> None:
        self._settle()
        if self._current(req_id, channel):
            self.resultReady.emit(channel, result)

    def _on_user_error(self, req_id: int, channel: str, error: UserError) -> None:
        self._settle()
        if self._current(req_id, channel):
            self.userError.emit(channel, error)

    def _on_failed(self, req_id: int, channel: str, text: str) -> None:
        self._settle()
        self.failed.emit(channel, text)
