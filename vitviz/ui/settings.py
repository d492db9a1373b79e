"""Settings remembered between sessions (QSettings): geometry, recent files, view choices."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from PySide6.QtCore import QSettings

MAX_RECENT = 10
MAX_PROMPT_SETS = 50  # checkpoints whose last prompts are remembered


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

    def prompts_for(self, checkpoint: str | Path) -> tuple[str, ...]:
        """The prompts last applied to ``checkpoint`` (a CLIP's), () when none."""
        found = self._prompt_sets().get(str(Path(checkpoint).resolve()), [])
        return tuple(p for p in found if isinstance(p, str) and p)

    def remember_prompts(self, checkpoint: str | Path, prompts: tuple[str, ...]) -> None:
        key = str(Path(checkpoint).resolve())
        sets = {key: list(prompts), **{k: v for k, v in self._prompt_sets().items() if k != key}}
        self.qs.setValue(
            "prompts/by_checkpoint", json.dumps(dict(list(sets.items())[:MAX_PROMPT_SETS]))
        )

    def _prompt_sets(self) -> dict[str, list[str]]:
        """{checkpoint path: its last prompts}, newest first (one JSON value in the settings)."""
        try:
            sets = json.loads(str(self.qs.value("prompts/by_checkpoint", "{}")))
        except (TypeError, ValueError):
            return {}
        return sets if isinstance(sets, dict) else {}

    def guesses_for(self, checkpoint: str | Path) -> dict[str, Any]:
        """The settings of ``checkpoint`` opened on a guess and not confirmed yet, with their
        values ({} when none)."""
        found = self._guess_sets().get(str(Path(checkpoint).resolve()), {})
        return found if isinstance(found, dict) else {}

    def remember_guesses(self, checkpoint: str | Path, guesses: dict[str, Any]) -> None:
        """Keep (or, given {}, forget: confirmed) the guessed settings of ``checkpoint``."""
        key = str(Path(checkpoint).resolve())
        sets = {k: v for k, v in self._guess_sets().items() if k != key}
        if guesses:
            sets = {key: dict(guesses), **sets}
        self.qs.setValue(
            "guesses/by_checkpoint", json.dumps(dict(list(sets.items())[:MAX_PROMPT_SETS]))
        )

    def _guess_sets(self) -> dict[str, Any]:
        try:
            sets = json.loads(str(self.qs.value("guesses/by_checkpoint", "{}")))
        except (TypeError, ValueError):
            return {}
        return sets if isinstance(sets, dict) else {}
