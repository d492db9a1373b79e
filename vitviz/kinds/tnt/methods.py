"""The method table's entries that run on a TNT (the window's engine, ``vitviz-cli explain``,
``faithfulness`` and ``stats`` reach them through ``TNTKind.implementation``): the ViT's methods
on the outer attention, [CLS, patches] on the patch grid (attention, DINO masks, rollout,
gradient rollout, relevance, Grad-SAM, Grad-CAM on attention), and the table's own CAM family,
features and random baseline. The kind's one declaration of them is ``METHODS`` and ``CANNOT``
at the end (DESIGN §5).

Between two outer attentions a block adds to each patch token its MLP's output and a projection
of that patch's own pixel tokens (its inner transformer, which reads only that patch's pixels
and no other token): both are per-token, so the outer attentions are the only layers that mix
tokens, and the rollouts and relevance are the ViT's over them (docs/methods.md). A query is a
cell of the patch grid; without one the CLS token.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from vitviz.explain.gradcam import attention_gradcam, gradcam_method
from vitviz.explain.gradsam import grad_sam
from vitviz.explain.masks import dino_masks
from vitviz.explain.rollout import gradient_rollout, relevance, rollout
from vitviz.kindapi.protocol import KindMethod
from vitviz.kinds.kind_methods import (
    block_index,
    head_of_rows,
    requires_own,
    versions_of,
    with_gradients_of,
)
from vitviz.kinds.tnt.analysis import TNTAnalysis, analyze_tnt
from vitviz.kinds.tnt.network import TNT

# why a TNT can't run the table's other methods (``TNTKind.missing_method``)
CANNOT: dict[str, str] = {
    "transformer-attribution": "its LRP rules cover a ViT's blocks; vitviz has no rule for a "
    "TNT's inner transformer and the projection of its pixel tokens added to each patch token",
}


def token_of(analysis: TNTAnalysis, stage: int, cell: tuple[int, int]) -> int:
    """The patch token (row-major, CLS not counted) of patch-grid cell ``cell``."""
    H, W = analysis.stage_grids[0]
    if not (0 <= cell[0] < H and 0 <= cell[1] < W):
        raise ValueError(f"query {cell} is outside the {H}×{W} grid")
    return cell[0] * W + cell[1]


def query_row(analysis: TNTAnalysis, cell: tuple[int, int] | None) -> int:
    """The row of the outer attention the query reads: the CLS (0) or 1 + the patch."""
    return 0 if cell is None else 1 + token_of(analysis, 0, cell)


def block_rows(analysis: TNTAnalysis, block: int, cell: tuple[int, int] | None) -> Tensor:
    """(heads, h, w): each head's row of the query over block ``block``'s patch keys."""
    attn = analysis.attentions[block]  # (heads, 1 + N, 1 + N)
    return attn[:, query_row(analysis, cell), 1:].reshape(-1, *analysis.stage_grids[0])


def attention_map(
    analysis: TNTAnalysis, block: int, head: int, cell: tuple[int, int] | None
) -> Tensor:
    """(h, w) block ``block``'s outer attention of the query for ``head`` (−1: their mean)."""
    b = block_index(analysis, block)
    return head_of_rows(analysis, b, head, lambda: block_rows(analysis, b, cell), "block")


with_gradients = with_gradients_of(analyze_tnt)


def _batched(tensors: list[Tensor]) -> list[Tensor]:
    return [t.float()[None] for t in tensors]


def tnt_method_map(
    analysis: TNTAnalysis,
    name: str,
    query: tuple[int, int] | None,
    target_class: int | None,
    params: Mapping[str, Any],
) -> Tensor:
    """The map of method ``name`` on the patch grid for a query cell (None: the CLS)."""
    grid = tuple(analysis.stage_grids[0])
    row = query_row(analysis, query)
    if name == "attention":
        return attention_map(
            analysis, int(params.get("layer", -1)), int(params.get("head", -1)), query
        )
    if name == "dino-masks":
        b = block_index(analysis, int(params.get("layer", -1)))
        a = analysis.attentions[b].float()[None]
        masks = dino_masks(a, grid, 1, float(params.get("threshold", 0.6)), row)
        masks = masks[0].to(torch.float32)  # (heads, h, w)
        head = int(params.get("head", -1))
        if not -1 <= head < masks.shape[0]:
            raise ValueError(f"head {head} out of range: block {b} has {masks.shape[0]} heads")
        return masks.mean(dim=0) if head == -1 else masks[head]
    start = int(params.get("start_layer", 0))
    discard = float(params.get("discard_ratio", 0.0))
    if name == "rollout":
        attn = _batched(analysis.attentions)
        fusion = str(params.get("fusion", "mean"))
        return rollout(attn, grid, 1, row, fusion, None, discard, start)[0]
    g = with_gradients(analysis, target_class)
    attn, grads = _batched(g.attentions), _batched(g.gradients or [])
    if name == "gradient-rollout":
        return gradient_rollout(attn, grads, grid, 1, row, discard, start)[0]
    if name == "relevance":
        return relevance(attn, grads, grid, 1, row, start)[0]
    if name == "grad-sam":
        return grad_sam(attn, grads, grid, 1, row)[0]
    if name == "attention-gradcam":
        return attention_gradcam(attn[-1], grads[-1], grid, 1, row)[0]
    raise ValueError(f"vitviz has no TNT version of {name!r} here (see METHODS)")


_requires_own = requires_own("TNT", TNT)
_version = versions_of(tnt_method_map)


# The TNT kind's one declaration (DESIGN §5): its versions of the table's methods (and what it
# can't run: ``CANNOT`` above)
METHODS: dict[str, KindMethod] = {
    name: KindMethod(_version(name), requires=_requires_own)
    for name in (
        "attention",
        "dino-masks",
        "rollout",
        "gradient-rollout",
        "relevance",
        "grad-sam",
        "attention-gradcam",
    )
}
METHODS["gradcam"] = KindMethod(gradcam_method, requires=_requires_own)
