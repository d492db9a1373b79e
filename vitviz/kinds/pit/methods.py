"""The method table's entries that run on a PiT (the window's engine, ``vitviz-cli explain``,
``faithfulness`` and ``stats`` reach them through ``PiTKind.implementation``): attention and
DINO masks (one block, its stage's grid), rollout, gradient rollout and relevance across the
stages (``rollout``), Grad-CAM on the last block's attention (the last stage's grid) and the
table's own CAM family, features and random baseline. The others say why they don't run. The
kind's one declaration of them is ``METHODS`` and ``CANNOT`` at the end (DESIGN §5).

A query is a cell of the first stage's grid; in each block it is the patch of that block's
stage covering the cell's centre. Without one, the query is the CLS token (a distilled PiT's
too, as a distilled DeiT's in the ViT kind).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from vitviz.explain.gradcam import attention_gradcam, gradcam_method
from vitviz.explain.masks import dino_masks
from vitviz.kindapi.protocol import KindMethod
from vitviz.kinds.kind_methods import (
    ROLLOUTS,
    block_index,
    chained_map,
    head_of_rows,
    requires_own,
    rollout_methods,
    token_under,
    versions_of,
    with_gradients_of,
)
from vitviz.kinds.pit.analysis import PiTAnalysis, analyze_pit
from vitviz.kinds.pit.network import PiTViT

# why a table parameter means nothing to the chains across a PiT's stages
NOT_ACROSS_STAGES = {
    "discard_ratio": "the rollout across a PiT's stages has no discard step (it keeps every "
    "entry of each block)",
    "start_layer": "the rollout across a PiT's stages always runs through every block of every "
    "stage",
}
# why a PiT can't run the table's other methods (``PiTKind.missing_method``)
CANNOT: dict[str, str] = {
    "transformer-attribution": "its LRP rules cover a ViT's blocks; vitviz has no rule for a "
    "PiT's pooling between stages (the depthwise strided conv and the Linear on the CLS)",
    "grad-sam": "it averages every layer's query row over one grid of patches; a PiT's stages "
    "attend over different grids",
}


token_of = token_under


def query_row(analysis: PiTAnalysis, block: int, cell: tuple[int, int] | None) -> int:
    """The row of block ``block``'s attention the query reads: the CLS (0) or the patch."""
    if cell is None:
        return 0
    return analysis.num_prefix_tokens + token_of(analysis, analysis.block_stages[block], cell)


def block_rows(analysis: PiTAnalysis, block: int, cell: tuple[int, int] | None) -> Tensor:
    """(heads, h_s, w_s): each head's row of the query over block ``block``'s patches."""
    attn = analysis.attentions[block]  # (heads, P + N, P + N)
    P = analysis.num_prefix_tokens
    grid = analysis.stage_grids[analysis.block_stages[block]]
    return attn[:, query_row(analysis, block, cell), P:].reshape(-1, *grid)


def attention_map(
    analysis: PiTAnalysis, block: int, head: int, cell: tuple[int, int] | None
) -> Tensor:
    """(h_s, w_s) block ``block``'s attention of the query for ``head`` (−1: their mean)."""
    b = block_index(analysis, block)
    return head_of_rows(analysis, b, head, lambda: block_rows(analysis, b, cell), "block")


with_gradients = with_gradients_of(analyze_pit)


def pit_method_map(
    analysis: PiTAnalysis,
    name: str,
    query: tuple[int, int] | None,
    target_class: int | None,
    params: Mapping[str, Any],
) -> Tensor:
    """The map of method ``name`` for a query cell of the first stage's grid (None: the CLS).
    Attention and DINO masks at their block's grid, Grad-CAM on attention at the last stage's,
    the rollouts at the first's."""
    last = len(analysis.stage_grids) - 1
    if name == "attention":
        return attention_map(
            analysis, int(params.get("layer", -1)), int(params.get("head", -1)), query
        )
    if name == "dino-masks":
        b = block_index(analysis, int(params.get("layer", -1)))
        a = analysis.attentions[b].float()[None]
        grid = analysis.stage_grids[analysis.block_stages[b]]
        row = query_row(analysis, b, query)
        masks = dino_masks(
            a, grid, analysis.num_prefix_tokens, float(params.get("threshold", 0.6)), row
        )
        masks = masks[0].to(torch.float32)  # (heads, h_s, w_s)
        head = int(params.get("head", -1))
        if not -1 <= head < masks.shape[0]:
            raise ValueError(f"head {head} out of range: block {b} has {masks.shape[0]} heads")
        return masks.mean(dim=0) if head == -1 else masks[head]
    token = None if query is None else token_of(analysis, last, query)
    if name in ROLLOUTS:
        return chained_map(analysis, name, token, target_class, params, with_gradients)
    if name == "attention-gradcam":
        g = with_gradients(analysis, target_class)
        b = len(g.attentions) - 1
        row = query_row(g, b, query)
        a, grad = g.attentions[b].float()[None], g.gradients[b].float()[None]  # type: ignore[index]
        return attention_gradcam(a, grad, g.stage_grids[last], g.num_prefix_tokens, row)[0]
    raise ValueError(f"vitviz has no PiT version of {name!r} here (see METHODS)")


_requires_own = requires_own("PiT", PiTViT)
_version = versions_of(pit_method_map)


# The PiT kind's one declaration (DESIGN §5): its versions of the table's methods, each taking
# every parameter of its entry but those it refuses (and what it can't run: ``CANNOT`` above)
METHODS: dict[str, KindMethod] = {
    "attention": KindMethod(_version("attention"), requires=_requires_own),
    "dino-masks": KindMethod(_version("dino-masks"), requires=_requires_own),
    **rollout_methods(_version, NOT_ACROSS_STAGES, _requires_own),
    "attention-gradcam": KindMethod(_version("attention-gradcam"), requires=_requires_own),
    "gradcam": KindMethod(gradcam_method, requires=_requires_own),
}
