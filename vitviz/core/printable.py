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


def byte_size(size: float) -> str:
    """Bytes as the hub writes sizes: "346.4 MB" (powers of 1000)."""
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} GB"
