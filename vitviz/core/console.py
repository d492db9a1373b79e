"""One line of CLI feedback on stderr, printable whatever the file names in it hold."""

from __future__ import annotations

import sys

from vitviz.core.printable import printable


def say(message: str) -> None:
    """Print ``message`` as one line on stderr (flushed)."""
    print(printable(message), file=sys.stderr, flush=True)
