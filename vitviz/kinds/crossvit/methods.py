"""The method table's entries that run on a CrossViT (the window's engine, ``vitviz-cli
explain``, ``faithfulness`` and ``stats`` reach them through ``CrossViTKind.implementation``):
attention and DINO masks of one layer on its key branch's grid, and the table's own feature
views and random baseline. The others say why they don't run. The kind's one declaration of
them is ``METHODS`` and ``CANNOT`` at the end (DESIGN §5).

A query is a cell of branch 0's grid (the clickable grid). In a ViT block of branch b it is the
patch of b's grid covering the cell's centre; without one, the CLS. A cross-attention layer has
one query, its CLS: its map is that row whatever is clicked.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from vitviz.explain.masks import dino_masks
from vitviz.kindapi.protocol import KindMethod
from vitviz.kinds.crossvit.analysis import CrossViTAnalysis
from vitviz.kinds.crossvit.network import CrossViTNet
from vitviz.kinds.kind_methods import block_index, requires_own, token_under, versions_of

_TWO_BRANCHES = (
    "a CrossViT's branches meet only through the cross-attention of their CLS tokens, between "
    "a LayerNorm-GELU-Linear projection and its way back; DESIGN §5 defines no {what} through "
    "those projections nor across the two grids"
)
CANNOT: dict[str, str] = {
    "rollout": _TWO_BRANCHES.format(what="rollout"),
    "gradient-rollout": _TWO_BRANCHES.format(what="rollout"),
    "relevance": _TWO_BRANCHES.format(what="relevance propagation"),
    "transformer-attribution": "its LRP rules cover a ViT's blocks; vitviz has no rule for a "
    "CrossViT's projections between its branches",
    "grad-sam": "it averages every layer's query row over one grid of patches; a CrossViT's "
    "layers attend over two grids, its cross-attention from the CLS alone",
    "attention-gradcam": "it reads one last layer's attention over the whole image; a "
    "CrossViT's prediction is the mean of two branches' heads, each read off its own grid",
}


def layer_index(analysis: CrossViTAnalysis, layer: int) -> int:
    return block_index(analysis, layer, "layer", "attention layers")


# the patch of a branch (row-major, CLS not counted) covering the centre of branch-0 cell
token_of = token_under


def query_row(analysis: CrossViTAnalysis, layer: int, cell: tuple[int, int] | None) -> int:
    """The row of layer ``layer``'s attention the query reads: the CLS (0) or the patch (a ViT
    block's); a cross-attention layer's one row."""
    if cell is None or analysis.layer_kinds[layer] == "cross":
        return 0
    return 1 + token_of(analysis, analysis.block_stages[layer], cell)


def layer_rows(analysis: CrossViTAnalysis, layer: int, cell: tuple[int, int] | None) -> Tensor:
    """(heads, h, w): each head's row of the query over layer ``layer``'s patch keys."""
    attn = analysis.attentions[layer]  # (heads, Q, 1 + N)
    grid = analysis.stage_grids[analysis.block_stages[layer]]
    return attn[:, query_row(analysis, layer, cell), 1:].reshape(-1, *grid)


def crossvit_method_map(
    analysis: CrossViTAnalysis,
    name: str,
    query: tuple[int, int] | None,
    target_class: int | None,
    params: Mapping[str, Any],
) -> Tensor:
    """The map of method ``name`` on its layer's key grid (either branch's)."""
    b = layer_index(analysis, int(params.get("layer", -1)))
    head = int(params.get("head", -1))
    heads = int(analysis.attentions[b].shape[0])
    if not -1 <= head < heads:
        raise ValueError(f"head {head} out of range: layer {b} has {heads} heads (-1: their mean)")
    if name == "attention":
        rows = layer_rows(analysis, b, query).float()
    elif name == "dino-masks":
        a = analysis.attentions[b].float()[None]
        grid = analysis.stage_grids[analysis.block_stages[b]]
        threshold = float(params.get("threshold", 0.6))
        rows = dino_masks(a, grid, 1, threshold, query_row(analysis, b, query))[0]
        rows = rows.to(torch.float32)
    else:
        raise ValueError(f"vitviz has no CrossViT version of {name!r} here (see METHODS)")
    return rows.mean(dim=0) if head == -1 else rows[head]


_requires_own = requires_own("CrossViT", CrossViTNet)
_version = versions_of(crossvit_method_map)


# The CrossViT kind's one declaration (DESIGN §5): its versions of the table's methods (and
# what it can't run: ``CANNOT`` above)
METHODS: dict[str, KindMethod] = {
    "attention": KindMethod(_version("attention"), requires=_requires_own),
    "dino-masks": KindMethod(_version("dino-masks"), requires=_requires_own),
}
