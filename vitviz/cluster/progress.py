"""The progress of a run on stderr: a bar with images/s and the time left (ETA). On a terminal
one line redrawn (at most ten times a second); elsewhere a line every ``LOG_EVERY`` seconds and
at the end, so a log stays short."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from vitviz.core.printable import printable

LOG_EVERY = 10.0  # seconds between lines when stderr is not a terminal
WIDTH = 24


def eta_text(seconds: float) -> str:
    """``1:02:03`` / ``2:03`` for a number of seconds."""
    s = round(max(0.0, seconds))
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class RunProgress:
    """``update(done, failed)`` after each image of ``total``; ``finish()`` ends the line."""

    def __init__(self, total: int, label: str = "", stream: TextIO | None = None) -> None:
        self.total, self.label = total, label
        self.stream = stream or sys.stderr
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._t0 = time.monotonic()
        self._drawn = 0.0
        self.done = self.failed = 0

    def text(self) -> str:
        elapsed = max(1e-9, time.monotonic() - self._t0)
        rate = self.done / elapsed
        left = (self.total - self.done) / rate if rate > 0 else float("nan")
        filled = int(WIDTH * self.done / max(1, self.total))
        bar = "#" * filled + "-" * (WIDTH - filled)
        eta = eta_text(left) if left == left else "?"
        failed = f", {self.failed} failed" if self.failed else ""
        return (
            f"{self.label}[{bar}] {self.done}/{self.total} images{failed}, "
            f"{rate:.1f} images/s, ETA {eta}"
        )

    def update(self, done: int, failed: int = 0) -> None:
        self.done, self.failed = done, failed
        now = time.monotonic()
        every = 0.1 if self._tty else LOG_EVERY
        if now - self._drawn < every and done < self.total:
            return
        self._drawn = now
        end = "\r" if self._tty and done < self.total else "\n"
        print(printable(self.text()), end=end, file=self.stream, flush=True)

    def finish(self) -> None:
        if self._tty and self.done < self.total:
            print(file=self.stream, flush=True)
