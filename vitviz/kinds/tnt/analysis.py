"""analyze_tnt: one forward pass of a TNT with everything its attention views need.

Logits, probabilities, each block's outer attention (heads, 1 + N, 1 + N) over [CLS, patches]
on the patch grid (and, asked for, its gradient). The inner attention (each patch's pixel tokens
over each other) is not kept: no view of vitviz's draws it (DESIGN §5).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from vitviz.kinds.staged_analysis import (
    StagedAnalysis,
    own_model,
    pass_fields,
    prepared_input,
)
from vitviz.kinds.tnt.network import TNT


@dataclass
class TNTAnalysis(StagedAnalysis):
    """What one image did in a TNT (batch of one)."""

    attentions: list[Tensor]  # per block (heads, 1 + N, 1 + N), rows = queries
    block_stages: list[int]  # per block: 0 (one stage)
    stage_grids: list[tuple[int, int]]  # [(h, w)]: the patch grid
    key_grids: list[tuple[int, int]]  # per block: the patch grid
    key_pixels: list[int]  # per block: the patch size
    stage_pixels: list[int]  # [patch size]
    pixel_grid: tuple[int, int]  # (n, n) pixel tokens of a patch
    num_prefix_tokens: int = 1  # the CLS token
    kind: str = "tnt"


def analyze_tnt(
    model_or_loaded: object, image: Any, gradients: bool = False, target_class: int | None = None
) -> TNTAnalysis:
    """Run a TNT (or a LoadedModel holding one) on ``image``: a normalised tensor (C, H, W) or
    (1, C, H, W), or, with a LoadedModel, anything ``vitviz.imaging.load_image`` opens, prepared
    as the checkpoint's preprocessing says. ``gradients``: also ∂y_c/∂A_b of every block's outer
    attention, c ``target_class`` (None: the top class)."""
    model = own_model(model_or_loaded, TNT, "analyze_tnt needs a TNT")
    cfg = model.config
    given = prepared_input(model_or_loaded, image, cfg.patch_size, "analyze_tnt")
    x = given.x
    if tuple(x.shape[-2:]) != tuple(cfg.image_size):
        raise ValueError(
            f"this TNT takes {cfg.image_size[0]}×{cfg.image_size[1]} images (its patch_pos is of "
            f"that grid), got {x.shape[-2]}×{x.shape[-1]}"
        )
    grads = None
    if gradients:
        if not cfg.num_classes:
            raise ValueError("gradients need a classification head, and this TNT has none")
        with torch.enable_grad():
            out = model.forward_explained(x)
            c = int(out.logits[0].argmax()) if target_class is None else int(target_class)
            if not 0 <= c < cfg.num_classes:
                raise ValueError(f"class {c} out of range: the model has {cfg.num_classes}")
            grads = [g[0].detach() for g in torch.autograd.grad(out.logits[0, c], out.attentions)]
    else:
        with torch.no_grad():
            out = model.forward_explained(x)
    logits = (out.logits[0] if cfg.num_classes else out.logits[0, :0]).detach()
    top = int(logits.argmax()) if logits.numel() else -1
    c = top if target_class is None else int(target_class)
    L = cfg.depths[0]
    return TNTAnalysis(
        **pass_fields(model_or_loaded, model, given, logits, c),
        attentions=[a[0].detach() for a in out.attentions],
        gradients=grads,
        block_stages=[0] * L,
        stage_grids=[cfg.grid],
        key_grids=[cfg.grid] * L,
        key_pixels=[cfg.patch_size] * L,
        stage_pixels=[cfg.patch_size],
        pixel_grid=cfg.pixel_grid,
        patch_size=cfg.patch_size,
    )
