"""analyze_volo: one forward pass of a VOLO with everything its explanations need.

Logits, probabilities, every attention layer's captured weights in the network's order: an
outlooker's (heads, windows, k², k²), a transformer block's (heads, N, N) over the half grid, a
class block's (heads, 1, 1 + N): the CLS as the one query over [CLS, patches]; each layer's
grid (``block_stages``: 0 stage 0's, 1 the half grid) and on request ∂y_c/∂A for every layer
(same shapes). y_c is the model's logit: head(CLS)_c + 0.5 · max_t aux_head(t)_c, so its
gradient reaches the CLS's path and the one patch token where aux_head's class c is highest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import Tensor

from vitviz.kinds.staged_analysis import (
    StagedAnalysis,
    explained_pass,
    own_model,
    pass_fields,
    prepared_input,
)
from vitviz.kinds.volo.network import VOLONet
from vitviz.kinds.volo.outlook import window_cells


@dataclass
class VOLOAnalysis(StagedAnalysis):
    """What one image did in a VOLO (batch of one). ``stage_grids`` are stage 0's grid and the
    half grid, ``block_stages`` each layer's, so the staged kinds' code reads a layer's map on
    its grid."""

    attentions: list[Tensor]  # per layer, see the module's docstring
    layer_kinds: list[str]  # per layer: "outlook", "self" or "class"
    layer_names: list[str]  # per layer: "0.3" (stage.block), "cls.1" (class block)
    block_stages: list[int]  # per layer: 0 (stage 0's grid) or 1 (the half grid)
    stage_grids: list[tuple[int, int]]  # (h, w) of stage 0 and of the half grid
    stage_pixels: list[int]  # input pixels per side of a token of each grid
    window_cells: Tensor  # (windows, k²) each outlook window's cells (H·W: the padding)
    kind: str = "volo"

    num_prefix_tokens: int = 0  # the grid blocks carry none; the class blocks' CLS is apart


def layer_layout(model: VOLONet) -> tuple[list[str], list[str], list[int]]:
    """(kinds, names, grids) of every attention layer in order."""
    cfg = model.config
    kinds, names, grids = [], [], []
    for s, depth in enumerate(cfg.depths):
        for j in range(depth):
            kinds.append("outlook" if s == 0 else "self")
            names.append(f"{s}.{j}")
            grids.append(0 if s == 0 else 1)
    for j in range(cfg.class_blocks):
        kinds.append("class")
        names.append(f"cls.{j}")
        grids.append(1)
    return kinds, names, grids


def analyze_volo(
    model_or_loaded: object,
    image: Any,
    gradients: bool = False,
    target_class: int | None = None,
) -> VOLOAnalysis:
    """Run a VOLO (or a LoadedModel holding one) on ``image``: a normalised tensor (C, H, W)
    or (1, C, H, W), or, with a LoadedModel, anything ``vitviz.imaging.load_image`` opens,
    prepared as the checkpoint's preprocessing says. ``target_class``: the class y_c whose
    gradients are taken (default the top prediction)."""
    model = own_model(model_or_loaded, VOLONet, "analyze_volo needs a VOLO")
    cfg = model.config
    given = prepared_input(model_or_loaded, image, 2 * cfg.patch_size, "analyze_volo")
    x = given.x
    out, logits, c, grads = explained_pass(model, x, gradients, target_class)
    kinds, names, grids = layer_layout(model)
    stage_grids = [tuple(g) for g in cfg.stage_grids()]
    cells = window_cells(
        stage_grids[0], cfg.window_grid(), cfg.kernel_size, cfg.outlook_stride, cfg.padding
    )
    return VOLOAnalysis(
        **pass_fields(model_or_loaded, model, given, logits, c),
        attentions=[a[0].detach() for a in out.attentions],
        layer_kinds=kinds,
        layer_names=names,
        block_stages=grids,
        stage_grids=stage_grids,  # type: ignore[arg-type]
        stage_pixels=[cfg.patch_size, 2 * cfg.patch_size],
        window_cells=cells,
        gradients=grads,
        patch_size=int(cfg.patch_size),
    )
