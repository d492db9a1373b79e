"""The heads knocked out of the engine's model (``vitviz.workers.interventions``), kept apart so
that the jobs can restore them when the model changes (``state`` is the jobs' ``EngineState``,
named loosely: that module imports this one): no Qt."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any


@dataclass
class HeldIntervention:
    """The hooks knocking ``heads`` out of ``model``, open until ``close``."""

    model: Any
    heads: tuple[tuple[int, int], ...]
    stack: ExitStack
    ablation: str = "zero"  # "mean": its values are one image's (renewed for another)

    def close(self) -> None:
        self.stack.close()


def release(state: Any) -> None:
    """Restore every head of the current model (the hooks removed)."""
    held = state.intervention
    state.intervention = None
    if held is not None:
        held.close()


def knocked_out(state: Any) -> tuple[tuple[int, int], ...]:
    held = state.intervention
    if held is None or state.loaded is None or held.model is not state.loaded.model:
        return ()
    return held.heads
