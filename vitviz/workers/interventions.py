"""The engine's jobs for knocking heads out in the window (DESIGN §5, "Interventions"): no Qt.

The knocked-out heads stay knocked out (zero or mean ablation, hooks held on the current model)
until they are restored or another model (or preprocessing) is used, so every pass the window
asks for (a new image, a class's gradients, a method's map) is the intervened model's. A mean
ablation's values are the image's it was asked on: the window asks again for a new image.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from vitviz.workers.held import hold, knocked_out, release
from vitviz.workers.job_basics import UserFacingError

if TYPE_CHECKING:
    from vitviz.workers.jobs import EngineState
    from vitviz.workers.messages import ImageResult


@dataclass(frozen=True)
class HeadEffectsResult:
    """Every head's effect on ``target_class`` (DESIGN §5) for the window's importance view:
    ``effect`` (L, H) float32 logits, ``effect_prob`` (L, H), NaN for a head its layer lacks,
    each head knocked out alone as ``ablation`` says; ``knocked_out`` the heads knocked out of
    the model it was measured on, as ``knocked_ablation`` says ("zero" when none are)."""

    effect: np.ndarray
    effect_prob: np.ndarray
    target_class: int
    class_name: str
    knocked_out: tuple[tuple[int, int], ...]
    ablation: str = "zero"
    knocked_ablation: str = "zero"


def held_ablation(state: EngineState) -> str:
    """How the heads held out of the current model are knocked out ("zero" when none are)."""
    return state.intervention.ablation if knocked_out(state) else "zero"


def knock_out(
    state: EngineState,
    heads: tuple[tuple[int, int], ...],
    gradients: bool = False,
    ablation: str = "zero",
) -> ImageResult:
    """Knock ``heads`` out of the current model (``ablation`` "zero", or "mean": each head's
    mean over the current image's tokens; () restores every head) and analyse the current
    image again with it: predictions, attention and maps then come from the intervened model."""
    from vitviz.workers.jobs import analyze_image

    if state.loaded is None or state.analysis is None or state.source is None:
        raise UserFacingError("Open a model and an image first.", "no_image")
    release(state)
    if heads:
        hold(state, heads, ablation, state.analysis.input[None])
    return analyze_image(state, state.source, state.label, gradients)


def head_importance(
    state: EngineState, target_class: int | None, ablation: str = "zero"
) -> HeadEffectsResult:
    """Every head's effect on ``target_class`` (None: the shown prediction) for the current
    image, knocked out alone (as ``ablation`` says) from the model as it is now (with the
    heads already out)."""
    from vitviz.pipeline.head_effects import head_effects

    if state.loaded is None or state.analysis is None:
        raise UserFacingError("Open a model and an image first.", "no_image")
    target = state.kind.default_class(state) if target_class is None else target_class
    if target < 0:
        raise UserFacingError("The model has no classes to measure heads on.", "image")
    effects = head_effects(state.loaded, state.analysis.input, target, ablation)
    names = state.loaded.class_names
    return HeadEffectsResult(
        effect=effects.effect.numpy().astype(np.float32),
        effect_prob=effects.effect_prob.numpy().astype(np.float32),
        target_class=effects.target,
        class_name=names[effects.target] if effects.target < len(names) else str(target),
        knocked_out=knocked_out(state),
        ablation=ablation,
        knocked_ablation=held_ablation(state),
    )


@dataclass(frozen=True)
class PatchingResult:
    """Every head's patching effect (DESIGN §5) from the image ``clean_label`` (A, the clean
    run) into the shown image (B) on A's top class: ``effect`` (L, H) float32, NaN for a head
    its layer lacks; ``knocked_out`` the heads knocked out of the model it was measured on (in
    both runs), as ``knocked_ablation`` says ("zero" when none are)."""

    effect: np.ndarray
    target_class: int
    class_name: str
    clean_label: str
    knocked_out: tuple[tuple[int, int], ...]
    knocked_ablation: str = "zero"


def head_patching(state: EngineState, clean: str) -> PatchingResult:
    """Each head of the shown image's pass patched in from ``clean``'s (a path), on the model
    as it is now (with the heads already out)."""
    from pathlib import Path

    from vitviz.core.errors import VitvizError
    from vitviz.pipeline.head_effects import patching_effects

    if state.loaded is None or state.analysis is None:
        raise UserFacingError("Open a model and an image first.", "no_image")
    label = Path(clean).name
    try:
        clean_input = state.kind.analyze(state.loaded, clean).input
        effects = patching_effects(state.loaded, clean_input, state.analysis.input)
    except (VitvizError, ValueError) as exc:
        raise UserFacingError(f"Patch from {label}: {exc}", "image") from exc
    names = state.loaded.class_names
    c = effects.target
    return PatchingResult(
        effect=effects.effect.numpy().astype(np.float32),
        target_class=c,
        class_name=names[c] if c < len(names) else str(c),
        clean_label=label,
        knocked_out=knocked_out(state),
        knocked_ablation=held_ablation(state),
    )
