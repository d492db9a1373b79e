"""The model ``vitviz-cli explain`` uses without ``--checkpoint``: the checkpoint the window
opened last, else the shipped default model. No Qt: the window's settings file is read as text.

The window keeps its settings with QSettings("vitviz", "vitviz"); on Linux and other Unix
systems (not macOS) that is the INI file ``$XDG_CONFIG_HOME/vitviz/vitviz.conf`` (default
``~/.config``), whose ``[recent]`` section holds ``checkpoints=`` as Qt's escaped string list,
newest first. Elsewhere (the macOS plist, the Windows registry) the shipped model is used.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from vitviz.core import resources

SECTION, KEY = "recent", "checkpoints"
_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}


@dataclass(frozen=True)
class ModelChoice:
    path: Path
    why: str  # e.g. "the model opened last in the window"


def settings_file() -> Path | None:
    """The window's QSettings INI file on this system, or None where Qt keeps no such file."""
    if sys.platform in ("darwin", "win32"):
        return None
    base = os.environ.get("XDG_CONFIG_HOME", "")
    root = Path(base) if os.path.isabs(base) else Path.home() / ".config"
    return root / "vitviz" / "vitviz.conf"


def ini_value(text: str, section: str, key: str) -> str | None:
    """The raw (still escaped) value of ``key`` in ``[section]`` of a QSettings INI text."""
    current = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("[") and stripped.endswith("]"):
            current = stripped[1:-1]
        elif current == section and "=" in stripped:
            name, _, value = stripped.partition("=")
            if name.strip() == key:
                return value.strip()
    return None


def _unescape_one(raw: str, i: int) -> tuple[str, int]:
    """The character of the backslash escape at ``raw[i]`` (just after the backslash)."""
    ch = raw[i]
    if ch in _ESCAPES:
        return _ESCAPES[ch], i + 1
    if ch == "x":
        j = i + 1
        while j < len(raw) and raw[j] in "0123456789abcdefABCDEF":
            j += 1
        return (chr(int(raw[i + 1 : j], 16)) if j > i + 1 else "x"), j
    if ch in "01234567":
        j = i
        while j < len(raw) and j < i + 3 and raw[j] in "01234567":
            j += 1
        return chr(int(raw[i:j], 8)), j
    return ch, i + 1  # \\ \" \' \? and anything else: the character itself


def qt_string_list(raw: str) -> list[str]:
    """Qt's INI string list (``a, "b, with comma", c``; one item: just the string) -> items.

    Values starting with ``@`` other than ``@@`` are Qt variants (not strings): an empty list."""
    if raw.startswith("@") and not raw.startswith("@@"):
        return []
    items: list[str] = []
    current: list[str] = []
    quoted = False
    i = 0
    while i < len(raw):
        ch = raw[i]
        if ch == "\\" and i + 1 < len(raw):
            char, i = _unescape_one(raw, i + 1)
            current.append(char)
            continue
        if ch == '"':
            quoted = not quoted
        elif ch == "," and not quoted:
            items.append("".join(current).strip())
            current = []
        elif ch.isspace() and not quoted and not current:
            pass  # the space after a separating comma
        else:
            current.append(ch)
        i += 1
    items.append("".join(current).strip())
    out = [item[1:] if item.startswith("@@") else item for item in items]
    return [item for item in out if item]


def last_checkpoint(settings: Path | None = None) -> Path | None:
    """The newest of the window's recent checkpoints that still exists, or None."""
    path = settings_file() if settings is None else settings
    if path is None:
        return None
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    raw = ini_value(text, SECTION, KEY)
    for item in qt_string_list(raw or ""):
        candidate = Path(item)
        if candidate.exists():
            return candidate
    return None


def choose_model(settings: Path | None = None) -> ModelChoice | None:
    """The checkpoint the window opened last, else the shipped model; None without either."""
    last = last_checkpoint(settings)
    if last is not None:
        return ModelChoice(last, "the checkpoint opened last in the window")
    try:
        shipped = resources.default_model_path()
    except FileNotFoundError:
        shipped = None
    if shipped is not None:
        return ModelChoice(shipped, "the model shipped with vitviz")
    return None
