"""One daemon thread at a time with its cancel flag: what a runner that works off the GUI
thread (a download, a folder's measures) holds. No Qt here: the runners emit their signals."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class CancellableThread:
    """Starts ``target(*args)`` on a daemon thread named ``name``; a second start while one
    runs is a RuntimeError saying ``busy``. ``cancelled`` is what the work polls."""

    def __init__(self, name: str, busy: str) -> None:
        self.name, self.busy = name, busy
        self._cancel = threading.Event()
        self._thread: threading.Thread | None = None

    def is_running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, target: Callable[..., None], *args: Any) -> None:
        if self.is_running():
            raise RuntimeError(self.busy)
        self._cancel.clear()
        self._thread = threading.Thread(target=target, args=args, name=self.name, daemon=True)
        self._thread.start()

    def cancel(self) -> None:
        self._cancel.set()

    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def wait(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)
