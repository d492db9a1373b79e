"""Text that is safe to show in a one-line message, whatever a file name holds."""

from __future__ import annotations

import os
import re

# C0 and C1 control characters: a newline or an escape sequence inside a file name.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` with bytes that are not UTF-8 as ``\\xNN`` and control characters escaped
    (``\\n``, ``\\x1b``), so a hostile file name can neither split a message into lines nor move
    a terminal's cursor, and the message can always be encoded."""
    try:
        text = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def display_name(path: str | os.PathLike) -> str:
    """A path as messages show it (see ``printable``)."""
    return printable(os.fsdecode(path))


def byte_size(size: float, step: int = 1000) -> str:
    """Bytes as "346.4 MB": powers of ``step``, 1000 as the hub writes sizes (the cache dialog
    counts in 1024s)."""
    for unit in ("B", "KB", "MB"):
        if size < step:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= step
    return f"{size:.1f} GB"
