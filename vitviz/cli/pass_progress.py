"""The forward passes of a long method (Score-CAM, Ablation-CAM: one per channel of its layer,
DESIGN §5) shown on a terminal's stderr as one line that counts up, then cleared; nothing where
stderr is not a terminal (a log keeps its one line per image). Ctrl-C stops them."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def passes_shown(label: str) -> Iterator[None]:
    """Inside it, each batch of a CAM's forward passes rewrites ``label: done/total forward
    passes`` on stderr (a terminal only)."""
    from vitviz.explain.cam_layer import reporting

    err = sys.stderr
    if not err.isatty():
        yield
        return

    def show(done: int, total: int) -> None:
        err.write(f"\r{label}: {done}/{total} forward passes")
        if done >= total:
            err.write("\r\033[K")
        err.flush()

    with reporting(progress=show):
        yield
