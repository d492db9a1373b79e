"""The method table's entries that run on a VOLO (the window's engine, ``vitviz-cli explain``,
``faithfulness`` and ``stats`` reach them through ``VOLOKind.implementation``): the attention of
one layer on its grid, and the table's own CAM family, feature views and random baseline. The
others say why they don't run. The kind's one declaration of them is ``METHODS`` and
``CANNOT`` at the end (DESIGN §5).

A query is a cell of stage 0's grid (the clickable grid). An outlooker's map is the cell's row
of the layer's token mixing (``outlook.outlook_rows``: its windows' weights folded onto the
cells they read), without a query the mean of every cell's row; a transformer block's is the
row of the half-grid token covering the cell's centre, without a query the mean of every
token's row (it has no CLS); a class block has one query, its CLS: its row over the patches
whatever is clicked.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import Tensor

from vitviz.kindapi.protocol import KindMethod
from vitviz.kinds.kind_methods import block_index, requires_own, token_under, versions_of
from vitviz.kinds.volo.analysis import VOLOAnalysis
from vitviz.kinds.volo.network import VOLONet
from vitviz.kinds.volo.outlook import outlook_rows

_NO_CHAIN = (
    "a VOLO's outlookers mix tokens by folding per-window weight matrices (a cell's row sums "
    "to the count of windows covering it, less their weight on the zero padding, not to 1) and "
    "a 2 × 2 convolution, no attention, halves the grid before the transformer blocks; DESIGN "
    "§5's {what} is defined over attention rows that sum to 1, and vitviz defines none through "
    "the fold and the downsample"
)
CANNOT: dict[str, str] = {
    "rollout": _NO_CHAIN.format(what="rollout"),
    "gradient-rollout": _NO_CHAIN.format(what="rollout"),
    "relevance": _NO_CHAIN.format(what="relevance propagation"),
    "transformer-attribution": "its LRP rules cover a ViT's blocks; vitviz has no rule for a "
    "VOLO's outlook fold, its downsample nor its class blocks",
    "grad-sam": "it averages every layer's query row over one grid of patches; a VOLO's layers "
    "read two grids, its outlookers' rows are no attention distribution",
    "dino-masks": "a mask holds a share of a query's attention; a VOLO's outlooker rows do not "
    "sum to 1 (each cell reads 1 to 4 overlapping windows)",
    "attention-gradcam": "its class is the logit head(CLS) + 0.5 · the maximum over the patches "
    "of the aux head, so the last class block's attention gradient carries only the CLS's part "
    "of it; vitviz does not weigh that as the class's Grad-CAM",
}


def query_row(analysis: VOLOAnalysis, layer: int, cell: tuple[int, int] | None) -> int | None:
    """The row of layer ``layer`` the query reads: the token under the cell (row-major on the
    layer's grid), the CLS row (0) of a class block, None: every row's mean."""
    kind = analysis.layer_kinds[layer]
    if kind == "class":
        return 0
    if cell is None:
        return None
    return token_under(analysis, analysis.block_stages[layer], cell)


def layer_rows(analysis: VOLOAnalysis, layer: int, cell: tuple[int, int] | None) -> Tensor:
    """(heads, h, w): each head's row of the query over layer ``layer``'s grid."""
    attn = analysis.attentions[layer]
    kind = analysis.layer_kinds[layer]
    grid = analysis.stage_grids[analysis.block_stages[layer]]
    row = query_row(analysis, layer, cell)
    if kind == "outlook":
        return outlook_rows(attn, analysis.window_cells, grid, row)
    if kind == "class":
        return attn[:, 0, 1:].reshape(-1, *grid)
    picked = attn.mean(dim=1) if row is None else attn[:, row]
    return picked.reshape(-1, *grid)


def volo_method_map(
    analysis: VOLOAnalysis,
    name: str,
    query: tuple[int, int] | None,
    target_class: int | None,
    params: Mapping[str, Any],
) -> Tensor:
    """The map of method ``name`` on its layer's grid."""
    if name != "attention":
        raise ValueError(f"vitviz has no VOLO version of {name!r} here (see METHODS)")
    b = block_index(analysis, int(params.get("layer", -1)))
    head = int(params.get("head", -1))
    heads = int(analysis.attentions[b].shape[0])
    if not -1 <= head < heads:
        raise ValueError(f"head {head} out of range: layer {b} has {heads} heads (-1: their mean)")
    rows = layer_rows(analysis, b, query).float()
    return rows.mean(dim=0) if head == -1 else rows[head]


_requires_own = requires_own("VOLO", VOLONet)
_version = versions_of(volo_method_map)


# The VOLO kind's one declaration (DESIGN §5): its versions of the table's methods (and what it
# can't run: ``CANNOT`` above)
METHODS: dict[str, KindMethod] = {
    "attention": KindMethod(_version("attention"), requires=_requires_own),
}
