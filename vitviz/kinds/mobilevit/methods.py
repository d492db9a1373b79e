"""The method table's entries that run on a MobileViT (the window's engine, ``vitviz-cli
explain``, ``faithfulness`` and ``stats`` reach them through ``MobileViTKind.implementation``):
attention (one transformer layer and head) and the table's own CAM family, features and random
baseline on the transformer layers' outputs (folded onto their stage's feature grid). The
others say why they don't run. The kind's one declaration of them is ``METHODS`` and
``CANNOT`` at the end (DESIGN §5).

A query is a cell of the first MobileViT block's feature grid; in each layer it is the feature
pixel of that layer's stage covering the cell's centre: its offset o in its p × p patch and its
patch n. The layer's row is A[o, n, :] over the N patches (at offset o in each), drawn on the
patch grid. Without a query: the mean of every row of every offset.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import Tensor

from vitviz.explain.gradcam import gradcam_method
from vitviz.kindapi.protocol import KindMethod
from vitviz.kinds.kind_methods import block_index, head_of_rows, requires_own, versions_of
from vitviz.kinds.mobilevit.analysis import MobileViTAnalysis
from vitviz.kinds.mobilevit.network import MobileViTNet

_CONVS = (
    "a MobileViT's convolutions (the local 3×3 and 1×1 before the layers, the projection and "
    "the 3×3 fusion after, the inverted residual blocks between) mix pixels outside any "
    "attention matrix"
)
# why a MobileViT can't run the table's other methods (``MobileViTKind.missing_method``)
CANNOT: dict[str, str] = {
    "rollout": f"it chains attention matrices from the input to the head; {_CONVS}",
    "gradient-rollout": f"it chains attention matrices from the input to the head; {_CONVS}",
    "relevance": f"it chains attention relevance from the input to the head; {_CONVS}",
    "transformer-attribution": "its LRP rules cover a ViT's blocks; vitviz has no rule for a "
    "MobileViT's convolutions, BatchNorms and unfold/fold",
    "dino-masks": "it reads a CLS token's attention, and a MobileViT has no CLS token",
    "grad-sam": "it averages every layer's query row over one grid of patches; a MobileViT's "
    "layers attend over different grids, per pixel offset",
    "attention-gradcam": "it reads the last layer's CLS row over the patch grid; a MobileViT "
    "has no CLS token",
    "pca": "it reads the last layer's tokens through the network's final norm into its head; a "
    "MobileViT's layers reach the head only through the fold, projection, fusion and convs",
}


def layer_rows(analysis: MobileViTAnalysis, layer: int, cell: tuple[int, int] | None) -> Tensor:
    """(heads, nh, nw): each head's row of the query's offset and patch over the patches of
    ``layer``'s stage (None: the mean of every row of every offset)."""
    attn = analysis.attentions[layer]  # (heads, P, N, N)
    grid = analysis.patch_grids[analysis.block_stages[layer]]
    if cell is None:
        rows = attn.mean(dim=(1, 2))
    else:
        o, n = analysis.offset_and_patch(layer, cell)
        rows = attn[:, o, n]
    return rows.reshape(-1, *grid)


def attention_map(
    analysis: MobileViTAnalysis, layer: int, head: int, cell: tuple[int, int] | None
) -> Tensor:
    """(nh, nw) layer ``layer``'s attention of the query for ``head`` (−1: their mean)."""
    b = block_index(analysis, layer)
    return head_of_rows(analysis, b, head, lambda: layer_rows(analysis, b, cell), "layer")


def mobilevit_method_map(
    analysis: MobileViTAnalysis,
    name: str,
    query: tuple[int, int] | None,
    target_class: int | None,
    params: Mapping[str, Any],
) -> Tensor:
    """The map of method ``name`` for a query cell (None: the mean row)."""
    if name == "attention":
        return attention_map(
            analysis, int(params.get("layer", -1)), int(params.get("head", -1)), query
        )
    raise ValueError(f"vitviz has no MobileViT version of {name!r} here (see METHODS)")


_requires_own = requires_own("MobileViT", MobileViTNet)
_version = versions_of(mobilevit_method_map)


# The MobileViT kind's one declaration (DESIGN §5): its versions of the table's methods, each
# taking every parameter of its entry (and what it can't run: ``CANNOT`` above)
METHODS: dict[str, KindMethod] = {
    "attention": KindMethod(_version("attention"), requires=_requires_own),
    "gradcam": KindMethod(gradcam_method, requires=_requires_own),
}
