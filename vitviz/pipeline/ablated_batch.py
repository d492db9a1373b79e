"""Many images through a model with heads knocked out (``vitviz-cli explain --ablate``): the
batches of ``iter_kind_analyses`` run inside the interventions' hooks (DESIGN §5,
"Interventions"), which stay while each item is used (its maps may run the model again)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from vitviz.core.errors import VitvizError
from vitviz.pipeline.batch import BatchItem, iter_kind_analyses
from vitviz.pipeline.intervention_record import InterventionRecord, mark
from vitviz.pipeline.interventions import (
    Ablation,
    HeadLayout,
    ablation_values,
    check_ablation,
    fixed_value,
    head_layout,
    holding,
    model_input,
)


def layout_for(loaded: Any, images: Sequence[Any]) -> HeadLayout:
    """The model's ``HeadLayout``, read on the first image that opens (each is tried in turn;
    the last one's error when none does)."""
    error: Exception | None = None
    for image in images:
        try:
            x = model_input(loaded, loaded.kind.analyze(loaded, image).input)
        except (VitvizError, ValueError) as exc:
            error = exc
            continue
        return head_layout(loaded.kind, loaded.model, x)
    raise error if error is not None else VitvizError("no image to read the model's heads on")


def iter_ablated(
    loaded: Any,
    images: Sequence[Any],
    heads: Sequence[tuple[int, int]],
    ablation: Ablation = "zero",
    branches: Sequence[int] = (),
    mlps: Sequence[int] = (),
    **options: Any,
) -> Iterator[BatchItem]:
    """``iter_kind_analyses(loaded, images, **options)`` from the model with ``heads`` knocked
    out as ``ablation`` says, ``branches``' attention branches and ``mlps``' MLP branches
    zeroed; each analysis carries the ``InterventionRecord``. An ablation that is
    the image's mean runs one image at a time (its values are each image's)."""
    check_ablation(ablation)
    layout = layout_for(loaded, images)
    chosen = layout.check_heads(list(heads))
    for block in branches:
        layout.attention_layer(block, f"the attention branch of block {block}")
    for block in mlps:
        layout.check_mlp(block)
    record = InterventionRecord.of(chosen, ablation, branches, mlps)
    if not (isinstance(ablation, str) and ablation == "mean"):
        values = {key: fixed_value(ablation, layout, *key) for key in chosen}
        with holding(layout, values, branches, mlps):
            for item in iter_kind_analyses(loaded, images, **options):
                yield _marked(item, record)
        return
    kind, model = loaded.kind, loaded.model
    for index, image in enumerate(images):
        try:
            x = model_input(loaded, kind.analyze(loaded, image).input)
            values = ablation_values(kind, model, x, layout, chosen, ablation)
        except (VitvizError, ValueError) as exc:
            error = exc if isinstance(exc, VitvizError) else VitvizError(str(exc))
            yield BatchItem(index, image, None, error)
            continue
        with holding(layout, values, branches, mlps):
            for item in iter_kind_analyses(loaded, [image], **options):
                item.index = index
                yield _marked(item, record)


def _marked(item: BatchItem, record: InterventionRecord) -> BatchItem:
    if item.analysis is not None:
        mark(item.analysis, record)
    return item
