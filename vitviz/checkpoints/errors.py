"""The one exception type for checkpoints a user gives us that can't be opened."""

from __future__ import annotations


class CheckpointError(ValueError):
    """A checkpoint that can't be opened; the message is short and says what is accepted."""
