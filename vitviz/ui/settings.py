"""Settings remembered between sessions (QSettings): geometry, recent files, view choices."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import QSettings

MAX_RECENT = 10


class AppSettings:
    def __init__(self, settings: QSettings | None = None) -> None:
        self.qs = settings or QSettings("vitviz", "vitviz")

    def get(self, key: str, default: Any = None, kind: type | None = None) -> Any:
        value = self.qs.value(key, default)
        if kind is None or value is None:
            return value
        try:
            if kind is bool and isinstance(value, str):
                return value.lower() == "true"
            return kind(value)
        except (TypeError, ValueError):
            return default

    def set(self, key: str, value: Any) -> None:
        self.qs.setValue(key, value)

    def recent(self, kind: str) -> list[str]:
        value = self.qs.value(f"recent/{kind}", [])
        items = [value] if isinstance(value, str) else list(value or [])
        return [p for p in items if p]

    def add_recent(self, kind: str, path: str | Path) -> None:
        p = str(Path(path).resolve())
        items = [p] + [q for q in self.recent(kind) if q != p]
        self.qs.setValue(f"recent/{kind}", items[:MAX_RECENT])
