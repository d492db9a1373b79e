"""ModelCodeError, and how an exception raised inside a user's file is told back to them."""

from __future__ import annotations

import linecache
import os
import traceback
from pathlib import Path

from vitviz.errors import VitvizError

_MESSAGE_LIMIT = 240


class ModelCodeError(VitvizError):
    """A model file that can't be used as given; the message says what was wrong and where."""


def _same_file(a: str, b: Path) -> bool:
    try:
        return os.path.realpath(a) == os.path.realpath(b)
    except (OSError, ValueError):
        return False


def _where(exc: BaseException, file: Path | None) -> str:
    """'model.py, line 12: x = y' for the last line of ``file`` in the traceback, or ''."""
    if file is None:
        return ""
    if isinstance(exc, SyntaxError) and exc.filename and _same_file(exc.filename, file):
        code = (exc.text or "").strip()
        return f"{file.name}, line {exc.lineno}" + (f": {code}" if code else "")
    found: tuple[str, int] | None = None
    for frame, lineno in traceback.walk_tb(exc.__traceback__):
        if _same_file(frame.f_code.co_filename, file):
            found = (frame.f_code.co_filename, lineno)
    if found is None:
        return ""
    code = linecache.getline(found[0], found[1]).strip()
    return f"{file.name}, line {found[1]}" + (f": {code}" if code else "")


def describe_exception(exc: BaseException, file: Path | None = None) -> str:
    """'TypeError: message (model.py, line 12: code)': type, shortened message, line in ``file``."""
    text = exc.msg if isinstance(exc, SyntaxError) and exc.msg else str(exc)
    text = " ".join(text.split())
    if len(text) > _MESSAGE_LIMIT:
        text = text[: _MESSAGE_LIMIT - 1] + "…"
    head = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    where = _where(exc, file)
    return f"{head} ({where})" if where else head
