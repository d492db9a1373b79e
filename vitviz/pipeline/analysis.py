"""analyze(model, image): the one entry point of the window, the CLI and notebooks, whatever the
model's kind (its ``ModelKind.analyze``; the ViT's is ``vitviz.kinds.vit.analysis``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vitviz.checkpoints import LoadedModel
from vitviz.core.errors import VitvizError
from vitviz.core.finite import NonFiniteError as NonFiniteError  # re-exported: analyze raises it
from vitviz.kindapi import KindAnalysis, UnknownKindError
from vitviz.pipeline.memory import NotEnoughMemoryError as NotEnoughMemoryError  # re-exported too


class UnsupportedModelError(VitvizError):
    """A model no registered kind explains, or one of another kind given to the ViT's own
    analysis (``analyze_vit``, ``vitviz.pipeline.batch``): one line naming it."""


def analyze(
    loaded: LoadedModel,
    image: Any,
    *,
    ablate: Sequence[tuple[int, int]] = (),
    ablation: Any = "zero",
    ablate_attention: Sequence[int] = (),
    ablate_mlp: Sequence[int] = (),
    **options: Any,
) -> KindAnalysis:
    """Run ``loaded``'s model on ``image`` with attention capture, whatever its kind: the
    kind's ``analyze`` (``vitviz.kinds``); for a ViT ``analyze_vit`` and its options (device,
    preprocessing, attention_dtype, gradients, max_side, layers). UnsupportedModelError (one
    line) for a model no kind explains.

    ``ablate`` [(layer, head), ...] knocks heads out as ``ablation`` says ("zero", "mean", a
    (head_dim,) tensor or a ``DatasetMean``), ``ablate_attention`` [block, ...] zeroes those
    blocks' attention branches and ``ablate_mlp`` [block, ...] those blocks' MLP branches:
    logits, attention and every map then come from the intervened model
    (``vitviz.pipeline.interventions``, DESIGN §5)."""
    try:
        kind = loaded.kind  # resolved when it was opened (a LoadedModel built by hand: now)
    except UnknownKindError as exc:
        raise UnsupportedModelError(f"{loaded.name}: {exc}") from None
    if ablate or ablate_attention or ablate_mlp:
        from vitviz.pipeline.interventions import analyze_ablated

        return analyze_ablated(
            loaded, image, ablate, ablation, ablate_attention, ablate_mlp, **options
        )
    return kind.analyze(loaded, image, **options)
