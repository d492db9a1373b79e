"""The method table's entries that run on a pyramid ViT (the window's engine, ``vitviz-cli
explain``, ``faithfulness`` and ``stats`` reach them through ``PyramidKind.implementation``):
attention (one block and head), rollout, gradient rollout and relevance across the stages
(``rollout``) and token Grad-CAM (the random baseline is the table's own). The others say why they
don't run. The kind's one declaration of them is ``METHODS`` and ``CANNOT`` at the end (DESIGN §5).

A query is a cell of the first stage's grid; in each block it is the token of that block's
stage covering the cell's centre. Without one, the attention map is the mean of every query's
row and the rollouts start from the mean over the last stage's tokens (what the head pools); a
PVT v1's from its last stage's CLS token (what its head reads; DESIGN §5).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from vitviz.explain.gradcam import gradcam_method
from vitviz.kindapi.protocol import KindMethod
from vitviz.kinds.kind_methods import (
    ROLLOUTS,
    chained_map,
    requires_own,
    rollout_methods,
    token_query_attention,
    token_under,
    versions_of,
    with_gradients_of,
)
from vitviz.kinds.pyramid.analysis import PyramidAnalysis, analyze_pyramid
from vitviz.kinds.pyramid.gradcam import pyramid_token_gradcam
from vitviz.kinds.pyramid.hiera_network import HieraViT
from vitviz.kinds.pyramid.network import PyramidViT

# why a table parameter means nothing to the chains across a pyramid's stages
# (``KindMethod.refusals``: the table refuses it with this reason)
NOT_ACROSS_STAGES = {
    "discard_ratio": "the rollout across a pyramid's stages has no discard step (it keeps every "
    "entry of each block)",
    "start_layer": "the rollout across a pyramid's stages always runs through every block of "
    "every stage (a later start would leave the first stage's grid unreached)",
}
# why a pyramid ViT can't run the table's other methods (``PyramidKind.missing_method``)
CANNOT: dict[str, str] = {
    "transformer-attribution": "its LRP rules cover a ViT's blocks; vitviz has no rule for the "
    "spatial-reduction convolution, the depthwise MLP convolution or the downsampling between "
    "stages (PVT v2), nor the position convolution (Twins), nor for the max-pooled queries and "
    "residual (Hiera)",
    "dino-masks": "it reads a CLS token's attention, and a pyramid ViT has no CLS token",
    "grad-sam": "it averages every layer's query row over one grid of patches; a pyramid ViT's "
    "blocks attend over different grids",
    "attention-gradcam": "it reads the last layer's CLS row over the patch grid; a pyramid ViT has "
    "no CLS token",
}


token_of = token_under


def block_rows(analysis: PyramidAnalysis, block: int, token: int | None) -> Tensor:
    """(heads, H_s, W_s): each head's row of query ``token`` (None: the mean row over every
    query; in a PVT v1's last stage the CLS's row, what its head reads), its keys' weights
    spread evenly over the tokens each key is made of; a CLS key's share is not on the grid."""
    attn = analysis.attentions[block]  # (heads, P + N, P + M)
    P = analysis.prefix_of(block)
    none = attn[:, 0, P:] if P else attn.mean(dim=1)
    rows = none if token is None else attn[:, P + token, P:]  # (heads, M)
    keys = analysis.keys[block]
    return keys.spread(rows.double()).reshape(-1, *keys.fine)


def attention_map(
    analysis: PyramidAnalysis, block: int, head: int, cell: tuple[int, int] | None
) -> Tensor:
    """(H_s, W_s) block ``block``'s attention of the query for ``head`` (−1: their mean)."""
    return token_query_attention(analysis, block, head, cell, block_rows)


with_gradients = with_gradients_of(analyze_pyramid)


def pyramid_method_map(
    analysis: PyramidAnalysis,
    name: str,
    query: tuple[int, int] | None,
    target_class: int | None,
    params: Mapping[str, Any],
) -> Tensor:
    """The map of method ``name`` for a query cell of the first stage's grid (None: the mean).
    Attention at its block's grid, Grad-CAM at the last stage's, the others at the first's."""
    last = len(analysis.stage_grids) - 1
    token = None if query is None else token_of(analysis, last, query)
    if name == "attention":
        return attention_map(
            analysis, int(params.get("layer", -1)), int(params.get("head", -1)), query
        )
    if name in ROLLOUTS:
        return chained_map(analysis, name, token, target_class, params, with_gradients)
    if name == "gradcam":
        model = analysis.loaded.model
        param = next(model.parameters())
        x = analysis.input[None].to(param.device, param.dtype)
        with torch.inference_mode(False):
            return pyramid_token_gradcam(model, x, target_class)[0].detach().cpu()
    raise ValueError(f"vitviz has no pyramid version of {name!r} here (see METHODS)")


_requires_own = requires_own("pyramid ViT", PyramidViT, HieraViT)
_version = versions_of(pyramid_method_map)


# The pyramid kind's one declaration (DESIGN §5): its versions of the table's methods, each taking
# every parameter of its entry but those it refuses (and what it can't run: ``CANNOT`` above)
METHODS: dict[str, KindMethod] = {
    "attention": KindMethod(_version("attention"), requires=_requires_own),
    **rollout_methods(_version, NOT_ACROSS_STAGES, _requires_own),
    "gradcam": KindMethod(gradcam_method, requires=_requires_own),
}
