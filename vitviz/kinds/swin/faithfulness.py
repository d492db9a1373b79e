"""Faithfulness of a Swin's maps: the deletion and insertion curves of ``faithfulness`` (DESIGN
§5) for the maps of the method table's Swin versions, measured by the one
path of every kind (``vitviz.explain.faithfulness.evaluate_methods``).

Nothing of the definition changes: the patches are the first stage's tokens (``patch_size``
pixels square, the grid the rollouts are drawn on), ordered by the map, highest first, ties by
the lower index; the same steps, the same all-zero baseline, the same AUC. The query is the
average pool the head reads (a Swin has no CLS token) and the class the image's top class.

A map at a coarser stage's resolution (a CAM: its layer's stage, the last at ``auto``;
attention: its block's stage) is taken to the first stage's grid nearest, as the window's
thumbnails are: each patch takes the value of the token that covers it (patch row y lies in
token row y // 2^s at stage s). The patches of one token then tie, and the stable order deletes
them row by row.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from torch import Tensor, nn

from vitviz.explain.faithfulness import DEFAULT_BATCH, DEFAULT_STEPS, ImageFaithfulness
from vitviz.explain.subject import HasModel
from vitviz.kinds.staged_analysis import ModelOnly
from vitviz.kinds.swin.analysis import SwinAnalysis
from vitviz.kinds.swin.attention import covering_tokens


def first_stage_map(map_: Tensor, stage_grids: Sequence[tuple[int, int]]) -> Tensor:
    """A map over stage s's grid (H_s, W_s) -> (H_0, W_0): each first-stage patch takes the
    value of the stage-s token that covers it (nearest; the token of a 2 × 2 merge holds
    patches 2r, 2r + 1, a padded merge's last token the one patch left)."""
    grid0 = tuple(stage_grids[0])
    shape = tuple(map_.shape)
    stages = [s for s, g in enumerate(stage_grids) if tuple(g) == shape]
    if not stages:
        grids = ", ".join(f"{h}×{w}" for h, w in stage_grids)
        raise ValueError(f"a {shape} map is on none of the model's stage grids ({grids})")
    s = stages[0]  # two stages share a grid only where it is 1 wide: the same picture
    rows = covering_tokens(grid0[0], 1, 2**s, shape[0])  # in patches: a token is 2^s wide
    cols = covering_tokens(grid0[1], 1, 2**s, shape[1])
    return map_[rows[:, None], cols[None, :]]  # (H_0, W_0)


def _has_head(model: Any) -> bool:
    return int(getattr(model.config, "num_classes", 0)) > 0


def evaluate_swin_methods(
    analysis: SwinAnalysis,
    model: nn.Module | HasModel,
    names: Sequence[str],
    *,
    steps: int = DEFAULT_STEPS,
    batch_size: int = DEFAULT_BATCH,
    params: Mapping[str, Mapping[str, Any]] | None = None,
    mask: Tensor | np.ndarray | None = None,
    name: str = "",
) -> ImageFaithfulness:
    """``evaluate_methods`` (the one path of every kind) for a Swin analysis and its model
    (or a LoadedModel holding it): the maps of ``names`` for the average-pool query, on the
    first stage's grid, measured by ``faithfulness``. ``mask``: a (H_0, W_0) bool patch mask
    (``mask_grid_for`` with the analysis's geometry). ValueError (plain) for a method that
    can't run on this Swin, before anything is computed."""
    from vitviz.explain.faithfulness import evaluate_methods

    model = getattr(model, "model", model)
    if analysis.input is None:
        raise ValueError("faithfulness needs the model input: this analysis has none")
    if not _has_head(model):
        raise ValueError("faithfulness needs a classification head, and this model has none")
    if analysis.loaded is None or analysis.loaded.model is not model:
        analysis = replace(analysis, loaded=ModelOnly(model))
    return evaluate_methods(
        analysis, names, steps=steps, batch_size=batch_size, params=params, mask=mask, name=name
    )
