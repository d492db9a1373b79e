"""Faithfulness of a Swin's maps: the deletion and insertion curves of ``faithfulness`` (DESIGN
§5, issue 14) for the maps ``swin_method_map`` computes (issue 16).

Nothing of the definition changes: the patches are the first stage's tokens (``patch_size``
pixels square, the grid the rollouts are drawn on), ordered by the map, highest first, ties by
the lower index; the same steps, the same all-zero baseline, the same AUC. The query is the
average pool the head reads (a Swin has no CLS token) and the class the image's top class.

A map at a coarser stage's resolution (Grad-CAM: the last stage; attention: its block's stage)
is taken to the first stage's grid nearest, as the window's thumbnails are: each patch takes the
value of the token that covers it (patch row y lies in token row y // 2^s at stage s). The
patches of one token then tie, and the stable order deletes them row by row.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from vitviz.explain.faithfulness import (
    DEFAULT_BATCH,
    DEFAULT_STEPS,
    ImageFaithfulness,
    faithfulness,
)
from vitviz.kinds.swin.analysis import SwinAnalysis, analyze_swin
from vitviz.kinds.swin.attention import covering_tokens
from vitviz.kinds.swin.methods import swin_method_map, swin_unavailable


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


def swin_unavailable_reason(name: str, model: Any) -> str | None:
    """Why method ``name`` can't be measured on this Swin (one sentence), or None."""
    from vitviz.explain.methods import get_method

    method = get_method(name)
    return swin_unavailable(method.name, method.label, _has_head(model), model)


def top_class(model: Any, x: Tensor) -> int:
    """The top class of the unperturbed input (C, H, W) through the model's own forward."""
    param = next(model.parameters())
    with torch.inference_mode():
        return int(model(x[None].to(param.device, param.dtype))[0].argmax())


def swin_maps(
    analysis: SwinAnalysis,
    model: Any,
    names: Sequence[str],
    target: int,
    params: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Tensor]:
    """{name: (H_0, W_0) float32 map} of ``swin_method_map`` for the average-pool query and
    class ``target``, each on the first stage's grid. ``params`` per method name (the table's
    parameters, its defaults filled in). The gradient rollout takes the gradients of
    ``target``: the analysis's own when it has them, else one more pass (``analysis`` is left
    as it is)."""
    from vitviz.explain.methods import get_method

    params = params or {}
    with_grads = analysis
    if "gradient-rollout" in names and (
        analysis.gradients is None or analysis.target_class != target
    ):
        with_grads = analyze_swin(model, analysis.input, gradients=True, target_class=target)
    out = {}
    for name in names:
        values = get_method(name).resolve(params.get(name), strict=False)
        source = with_grads if name == "gradient-rollout" else analysis
        raw = swin_method_map(source, model, name, None, target, values)
        out[name] = first_stage_map(raw.detach().cpu().float(), analysis.stage_grids)
    return out


def evaluate_swin_methods(
    analysis: SwinAnalysis,
    model: Any,
    names: Sequence[str],
    *,
    steps: int = DEFAULT_STEPS,
    batch_size: int = DEFAULT_BATCH,
    params: Mapping[str, Mapping[str, Any]] | None = None,
    mask: Tensor | np.ndarray | None = None,
    name: str = "",
) -> ImageFaithfulness:
    """``evaluate_methods`` for a Swin: the maps of ``names`` (``swin_maps``) measured by
    ``faithfulness`` on the analysis's input. ``model``: the Swin (or a LoadedModel holding
    it); ``mask``: a (H_0, W_0) bool patch mask (``mask_grid_for`` with the analysis's
    geometry). ValueError (plain) for a method that can't run on this Swin, before anything
    is computed."""
    model = getattr(model, "model", model)
    if analysis.input is None:
        raise ValueError("faithfulness needs the model input: this analysis has none")
    if not _has_head(model):
        raise ValueError("faithfulness needs a classification head, and this model has none")
    for n in names:
        reason = swin_unavailable_reason(n, model)
        if reason is not None:
            raise ValueError(reason)
    target = top_class(model, analysis.input)
    maps = swin_maps(analysis, model, names, target, params)
    return faithfulness(
        model,
        analysis.input,
        maps,
        steps=steps,
        batch_size=batch_size,
        name=name,
        mask=mask,
    )
