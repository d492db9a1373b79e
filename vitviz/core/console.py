"""One line of CLI feedback on stderr, printable whatever the file names in it hold."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from vitviz.core.printable import printable


def say(message: str) -> None:
    """Print ``message`` as one line on stderr (flushed)."""
    print(printable(message), file=sys.stderr, flush=True)


class ProgressLine:
    """A byte count on stderr: ``start(text)`` says what begins; ``update(done, total)`` redraws
    one line with a bar (on a terminal, at most ten times a second; elsewhere only the start and
    the end are written, so a log gets two lines); ``finish()`` ends the line."""

    WIDTH = 30

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.started = False
        self.done = self.total = 0
        self._drawn = 0.0
        self._t0 = 0.0
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def start(self, text: str) -> None:
        self.started, self._t0 = True, time.monotonic()
        print(printable(text), file=self.stream, flush=True)

    def update(self, done: int, total: int) -> None:
        self.done, self.total = done, total
        now = time.monotonic()
        if self.started and self._tty and (now - self._drawn >= 0.1 or done >= total):
            self._drawn = now
            self.stream.write("\r" + self.line())
            self.stream.flush()

    def line(self) -> str:
        share = self.done / self.total if self.total else 1.0
        filled = round(share * self.WIDTH)
        mb = f"{self.done / 1e6:.1f}/{self.total / 1e6:.1f} MB"
        return f"[{'#' * filled}{'.' * (self.WIDTH - filled)}] {share:4.0%} {mb}"

    def finish(self) -> None:
        if not self.started:
            return
        self.started = False
        took = time.monotonic() - self._t0
        back = "\r" if self._tty else ""  # over the bar on a terminal
        self.stream.write(f"{back}{self.line()} in {took:.1f} s\n")
        self.stream.flush()
