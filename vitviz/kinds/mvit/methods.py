"""The method table's entries that run on an MViTv2 (the window's engine, ``vitviz-cli
explain``, ``faithfulness`` and ``stats`` reach them through ``MViTKind.implementation``):
attention (one block and head, its row over the block's pooled keys on the key grid) and the
table's own CAM family, feature views and random baseline. The others say why they don't run.
The kind's one declaration of them is ``METHODS`` and ``CANNOT`` at the end (DESIGN §5).

A query is a cell of the first stage's grid; in each block it is the query token of that
block's stage covering the cell's centre. Without one, the row is the CLS token's (a model with
one), else the mean of every query's row.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import Tensor

from vitviz.explain.gradcam import gradcam_method
from vitviz.kindapi.protocol import KindMethod
from vitviz.kinds.kind_methods import block_index, head_of_rows, requires_own
from vitviz.kinds.mvit.analysis import MViTAnalysis
from vitviz.kinds.mvit.network import MViT

_POOLED = (
    "an MViTv2's keys and values are depthwise convolutions of its tokens (learned weights per "
    "channel, pooled with a LayerNorm after), and residual pooling adds the pooled queries to "
    "each head's output, so a block mixes its tokens by no attention matrix over them"
)
# why an MViTv2 can't run the table's other methods (``MViTKind.missing_method``)
CANNOT: dict[str, str] = {
    "rollout": f"it multiplies each block's attention over the tokens it reads; {_POOLED}",
    "gradient-rollout": f"it multiplies each block's attention over the tokens it reads; {_POOLED}",
    "relevance": f"its relevance rule propagates through attention over the tokens a block "
    f"reads; {_POOLED}",
    "transformer-attribution": "its LRP rules cover a ViT's blocks; vitviz has no rule for an "
    "MViTv2's pooling convolutions, their LayerNorms and residual pooling",
    "grad-sam": "it averages every layer's query row over one grid of patches; an MViTv2's "
    "blocks attend over key grids of different sizes",
    "attention-gradcam": "it reads the last block's CLS row over the grid its tokens lie on; an "
    "MViTv2's keys lie on a pooled grid (and most MViTv2s have no CLS token)",
    "dino-masks": "it thresholds the CLS row's mass over one grid of patches; an MViTv2's keys "
    "are pooled (and most MViTv2s have no CLS token)",
}


def token_of(analysis: MViTAnalysis, stage: int, cell: tuple[int, int]) -> int:
    """The query token of ``stage`` (row-major, prefix not counted) covering the centre of
    first-stage cell ``cell``."""
    p = analysis.stage_pixels[0]
    y, x = (cell[0] + 0.5) * p, (cell[1] + 0.5) * p
    H, W = analysis.stage_grids[stage]
    px = analysis.stage_pixels[stage]
    r = min(max(int(y // px), 0), H - 1)
    c = min(max(int(x // px), 0), W - 1)
    return r * W + c


def block_rows(analysis: MViTAnalysis, block: int, cell: tuple[int, int] | None) -> Tensor:
    """(heads, kh, kw): each head's row of the query over block ``block``'s pooled patch keys:
    the query token's, the CLS token's without a cell (a model with one), else the mean of every
    patch query's row."""
    attn = analysis.attentions[block]  # (heads, P + Nq, P + Nk)
    P = analysis.num_prefix_tokens
    if cell is not None:
        rows = attn[:, P + token_of(analysis, analysis.block_stages[block], cell)]
    elif P:
        rows = attn[:, 0]
    else:
        rows = attn.mean(dim=1)
    return rows[:, P:].reshape(-1, *analysis.key_grids[block])


def attention_map(
    analysis: MViTAnalysis, block: int, head: int, cell: tuple[int, int] | None
) -> Tensor:
    """(kh, kw) block ``block``'s attention of the query for ``head`` (−1: their mean)."""
    b = block_index(analysis, block)
    return head_of_rows(analysis, b, head, lambda: block_rows(analysis, b, cell), "block")


def _attention(
    analysis: MViTAnalysis,
    query: tuple[int, int] | None,
    target_class: int | None,
    params: Mapping[str, Any],
) -> Tensor:
    return attention_map(analysis, int(params.get("layer", -1)), int(params.get("head", -1)), query)


_requires_own = requires_own("MViTv2", MViT)


# The MViTv2 kind's one declaration (DESIGN §5): its versions of the table's methods (and what
# it can't run: ``CANNOT`` above)
METHODS: dict[str, KindMethod] = {
    "attention": KindMethod(_attention, requires=_requires_own),
    "gradcam": KindMethod(gradcam_method, requires=_requires_own),
}
