"""The method table's entries that run on a LeViT (the window's engine, ``vitviz-cli explain``,
``faithfulness`` and ``stats`` reach them through ``LeViTKind.implementation``): attention (one
layer and head; a subsample's queries on its stage's grid over keys on the stage before's),
rollout, gradient rollout and relevance across the stages (``rollout``), and the table's own
CAM family, features and random baseline on the blocks' outputs. The others say why they don't
run. The kind's one declaration of them is ``METHODS`` and ``CANNOT`` at the end (DESIGN §5).

A query is a cell of the first stage's grid; in each layer it is the token of that layer's
queries' stage covering the cell's centre. Without one, the attention map is the mean of every
query's row and the rollouts start from the mean over the last stage's tokens (what the head
pools).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
from vitviz.kinds.levit.analysis import LeViTAnalysis, analyze_levit
from vitviz.kinds.levit.network import LeViTNet

# why a table parameter means nothing to the chains across a LeViT's stages
NOT_ACROSS_STAGES = {
    "discard_ratio": "the rollout across a LeViT's stages has no discard step (it keeps every "
    "entry of each layer)",
    "start_layer": "the rollout across a LeViT's stages always runs through every layer of "
    "every stage (a later start would leave the first stage's grid unreached)",
}
# why a LeViT can't run the table's other methods (``LeViTKind.missing_method``)
CANNOT: dict[str, str] = {
    "transformer-attribution": "its LRP rules cover a ViT's blocks; vitviz has no rule for a "
    "LeViT's BatchNorms, Hardswish before the projection, learned attention biases or its "
    "subsample attention without a residual",
    "dino-masks": "it reads a CLS token's attention, and a LeViT has no CLS token",
    "grad-sam": "it averages every layer's query row over one grid of patches; a LeViT's "
    "layers attend over different grids",
    "attention-gradcam": "it reads the last layer's CLS row over the patch grid; a LeViT has no "
    "CLS token",
}


token_of = token_under


def block_rows(analysis: LeViTAnalysis, block: int, token: int | None) -> Tensor:
    """(heads, h_k, w_k): each head's row of query ``token`` (None: the mean row over every
    query) on the layer's keys' grid."""
    attn = analysis.attentions[block]  # (heads, N_q, N_k)
    rows = attn.mean(dim=1) if token is None else attn[:, token]
    return rows.reshape(-1, *analysis.stage_grids[analysis.key_stages[block]])


def attention_map(
    analysis: LeViTAnalysis, block: int, head: int, cell: tuple[int, int] | None
) -> Tensor:
    """(h_k, w_k) layer ``block``'s attention of the query for ``head`` (−1: their mean)."""
    nouns = ("layer", "attention layers")
    return token_query_attention(analysis, block, head, cell, block_rows, nouns)


with_gradients = with_gradients_of(analyze_levit)


def levit_method_map(
    analysis: LeViTAnalysis,
    name: str,
    query: tuple[int, int] | None,
    target_class: int | None,
    params: Mapping[str, Any],
) -> Tensor:
    """The map of method ``name`` for a query cell of the first stage's grid (None: the mean).
    Attention on its layer's keys' grid, the rollouts on the first stage's."""
    last = len(analysis.stage_grids) - 1
    token = None if query is None else token_of(analysis, last, query)
    if name == "attention":
        return attention_map(
            analysis, int(params.get("layer", -1)), int(params.get("head", -1)), query
        )
    if name in ROLLOUTS:
        return chained_map(analysis, name, token, target_class, params, with_gradients)
    raise ValueError(f"vitviz has no LeViT version of {name!r} here (see METHODS)")


_requires_own = requires_own("LeViT", LeViTNet)
_version = versions_of(levit_method_map)


# The LeViT kind's one declaration (DESIGN §5): its versions of the table's methods, each taking
# every parameter of its entry but those it refuses (and what it can't run: ``CANNOT`` above)
METHODS: dict[str, KindMethod] = {
    "attention": KindMethod(_version("attention"), requires=_requires_own),
    **rollout_methods(_version, NOT_ACROSS_STAGES, _requires_own),
    "gradcam": KindMethod(gradcam_method, requires=_requires_own),
}
