"""The one exception type for checkpoints a user gives us that can't be opened."""

from __future__ import annotations

from typing import Any

from vitviz.core.errors import VitvizError


class CheckpointError(VitvizError):
    """A checkpoint that can't be opened; the message is short and says what is accepted."""


class MissingSettingsError(CheckpointError):
    """The weights don't say everything: ``fields`` maps each missing setting to an example
    (timm's value where it has one: a guess); ``assumed``: the settings a convention gave, with
    their values, which a dialog shows beside them as guesses too."""

    def __init__(
        self,
        message: str,
        fields: dict[str, Any] | None = None,
        assumed: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.fields = dict(fields or {})
        self.assumed = dict(assumed or {})
