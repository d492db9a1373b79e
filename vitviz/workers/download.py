"""Model downloads for the window on a thread of their own (``checkpoints.hub_fetch``): first
the plan (the files and their size, read from the hub's listing, or the cached copy), then,
once the user agrees, the files, with progress and cancel. Signals arrive on the GUI thread."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal

from vitviz.core.errors import VitvizError
from vitviz.workers.cancellable_thread import CancellableThread


class DownloadRunner(QObject):
    """One plan or fetch at a time. ``planned(plan)`` or ``cached(path)`` after ``plan(ref)``;
    ``progress(done, total)`` then one of ``finished(path)``, ``cancelled()`` after
    ``fetch(plan)``; ``failed(message)`` for any fault of either."""

    planned = Signal(object)  # hub_fetch.DownloadPlan
    cached = Signal(object)  # Path: what opens, already on this disk
    progress = Signal(object, object)  # bytes done, bytes in all (Python ints: > 2 GiB fits)
    finished = Signal(object)  # Path
    cancelled = Signal()
    failed = Signal(str)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._worker = CancellableThread("vitviz-download", "a download is under way already")

    def is_running(self) -> bool:
        return self._worker.is_running()

    def plan(self, text: str) -> None:
        """Read what ``text`` (``org/name[@revision]``) needs: ``cached`` or ``planned``."""
        self._start(self._plan, text)

    def fetch(self, plan: Any) -> None:
        """Download ``plan`` (resuming what an earlier try left): ``finished`` or ``cancelled``."""
        self._start(self._fetch, plan)

    def cancel(self) -> None:
        self._worker.cancel()

    def wait(self, timeout: float | None = None) -> None:
        self._worker.wait(timeout)

    def _start(self, work: Callable[[Any], None], arg: Any) -> None:
        self._worker.start(self._guarded, work, arg)

    def _guarded(self, work: Callable[[Any], None], arg: Any) -> None:
        from vitviz.checkpoints.hub_fetch import DownloadCancelledError

        try:
            work(arg)
        except DownloadCancelledError:
            self.cancelled.emit()
        except (VitvizError, MemoryError) as exc:
            self.failed.emit(str(exc) or type(exc).__name__)
        except Exception as exc:  # a bug: said in the dialog, its traceback on stderr
            why = f"{type(exc).__name__}: {exc}"
            self.failed.emit(f"An unexpected error stopped the download ({why}).")
            raise

    def _plan(self, text: str) -> None:
        from vitviz.checkpoints.errors import CheckpointError
        from vitviz.checkpoints.hub_fetch import cached_target, hub_settings, plan_download
        from vitviz.checkpoints.hub_paths import parse_model_ref

        ref = parse_model_ref(text.strip())
        if ref is None:
            raise CheckpointError(
                f"{text.strip() or 'nothing'} is not a model id: type org/name, e.g. "
                "facebook/dinov2-small (or org/name@revision)."
            )
        settings = hub_settings()
        found = cached_target(*ref, cache=settings.cache)
        if found is not None:
            self.cached.emit(found)
            return
        self.planned.emit(plan_download(*ref, settings=settings))

    def _fetch(self, plan: Any) -> None:
        from vitviz.checkpoints.hub_fetch import fetch

        last = [0.0]

        def report(done: int, total: int) -> None:  # at most 20 a second reach the window
            now = time.monotonic()
            if done >= total or now - last[0] >= 0.05:
                last[0] = now
                self.progress.emit(done, total)

        path: Path = fetch(plan, progress=report, cancelled=self._worker.cancelled)
        self.finished.emit(path)
