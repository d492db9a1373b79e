"""The heads knocked out of the engine's model (``vitviz.workers.interventions``), kept apart so
that the jobs can restore them when the model changes and renew a mean ablation's values for a
new image (``state`` is the jobs' ``EngineState``, named loosely: that module imports this one):
no Qt."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import Tensor


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


def hold(state: Any, heads: tuple[tuple[int, int], ...], ablation: str, x: Tensor) -> None:
    """Hold ``heads`` knocked out of the current model (none held now) with their values
    for the model input ``x`` (1, C, H, W)."""
    from vitviz.core.errors import VitvizError
    from vitviz.pipeline.interventions import (
        ablation_values,
        check_ablation,
        head_layout,
        holding,
        model_input,
    )
    from vitviz.workers.job_basics import UserFacingError

    assert state.loaded is not None
    model = state.loaded.model
    x = model_input(state.loaded, x)  # the model may have moved since (the Device box)
    layout = head_layout(state.kind, model, x)
    try:
        check_ablation(ablation)
        chosen = tuple(layout.check_heads(list(heads)))
        values = ablation_values(state.kind, model, x, layout, chosen, ablation)
    except VitvizError as exc:
        raise UserFacingError(str(exc), "image") from exc
    stack = ExitStack()
    stack.enter_context(holding(layout, values))
    state.intervention = HeldIntervention(model, chosen, stack, ablation)


def renew_means(state: Any, x: Tensor) -> bool:
    """Before another image (model input ``x`` (1, C, H, W)) is shown: a mean ablation held
    takes its values on it (the first result shown is then right); False where none is held."""
    held = state.intervention
    if held is None or held.ablation != "mean" or state.loaded is None:
        return False
    if held.model is not state.loaded.model:
        return False
    release(state)
    hold(state, held.heads, "mean", x)
    return True
