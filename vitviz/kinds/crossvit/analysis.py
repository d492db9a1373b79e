"""analyze_crossvit: one forward pass of a CrossViT with everything its explanations need.

Logits, probabilities, every attention layer's captured attention in the network's order
(``CrossViTConfig.layers``): a ViT block's (heads, 1 + N_b, 1 + N_b) over its branch's CLS and
grid, a cross-attention layer's (heads, 1, 1 + N_o): its branch's CLS (projected) as the one
query over [itself, the other branch's patches]; each layer's key grid (``layer_branches``: the
branch whose patches its keys are) and the two branch grids; on request ∂y_c/∂A for every
layer (same shapes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import Tensor

from vitviz.kinds.crossvit.network import CrossViTNet
from vitviz.kinds.staged_analysis import (
    StagedAnalysis,
    explained_pass,
    own_model,
    pass_fields,
    prepared_input,
)


@dataclass
class CrossViTAnalysis(StagedAnalysis):
    """What one image did in a CrossViT (batch of one). ``stage_grids`` are the two branches'
    grids and ``block_stages`` each layer's key branch, so the staged kinds' code reads a
    layer's map on its grid."""

    attentions: list[Tensor]  # per layer (heads, Q, 1 + N): Q = 1 + N (self), 1 (cross)
    block_stages: list[int]  # per layer: the branch whose grid its keys are
    layer_kinds: list[str]  # per layer: "self" or "cross"
    layer_blocks: list[int]  # per layer: its multi-scale block
    layer_owners: list[int]  # per layer: the branch whose tokens it updates (its CLS's)
    stage_grids: list[tuple[int, int]]  # (h, w) of branch 0 and branch 1
    stage_pixels: list[float]  # input pixels per side of a token of each branch
    kind: str = "crossvit"

    num_prefix_tokens: int = 1  # the CLS of each branch


def analyze_crossvit(
    model_or_loaded: object,
    image: Any,
    gradients: bool = False,
    target_class: int | None = None,
) -> CrossViTAnalysis:
    """Run a CrossViT (or a LoadedModel holding one) on ``image``: a normalised tensor
    (C, S, S) or (1, C, S, S), or, with a LoadedModel, anything ``vitviz.imaging.load_image``
    opens, prepared as the checkpoint's preprocessing says. ``target_class``: the class y_c
    whose gradients are taken (default the top prediction)."""
    model = own_model(model_or_loaded, CrossViTNet, "analyze_crossvit needs a CrossViT")
    cfg = model.config
    given = prepared_input(model_or_loaded, image, cfg.patch_sizes[0], "analyze_crossvit")
    x = given.x
    out, logits, c, grads = explained_pass(model, x, gradients, target_class)
    layers = cfg.layers()
    return CrossViTAnalysis(
        **pass_fields(model_or_loaded, model, given, logits, c),
        attentions=[a[0].detach() for a in out.attentions],
        block_stages=[b if how == "self" else 1 - b for _k, how, b in layers],
        layer_kinds=[how for _k, how, _b in layers],
        layer_blocks=[k for k, _how, _b in layers],
        layer_owners=[b for _k, _how, b in layers],
        stage_grids=[cfg.grid(0), cfg.grid(1)],
        stage_pixels=[cfg.token_pixels(0), cfg.token_pixels(1)],
        gradients=grads,
        patch_size=int(cfg.patch_sizes[0]),
    )
