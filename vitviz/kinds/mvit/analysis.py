"""analyze_mvit: one forward pass of an MViTv2 with everything its attention views need.

Logits, probabilities, each block's captured attention (heads, P + Nq, P + Nk): its queries on
its stage's grid over its keys pooled on the key grid (the CLS token first in both where the
model has one), the stage grids and each block's key grid with their pixels per cell.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from vitviz.kinds.mvit.config import MViTConfig
from vitviz.kinds.mvit.network import MViT
from vitviz.kinds.staged_analysis import (
    StagedAnalysis,
    own_model,
    pass_fields,
    prepared_input,
)


@dataclass
class MViTAnalysis(StagedAnalysis):
    """What one image did in an MViTv2 (batch of one)."""

    attentions: list[Tensor]  # per block (heads, P + Nq, P + Nk), rows = queries
    block_stages: list[int]  # per block
    stage_grids: list[tuple[int, int]]  # (h_s, w_s) per stage: its blocks' queries
    key_grids: list[tuple[int, int]]  # per block: the grid its keys are pooled to
    key_pixels: list[int]  # per block: input pixels per side of a key cell
    stage_pixels: list[int]  # input pixels per side of a token of each stage
    num_prefix_tokens: int  # 1 (CLS) or 0
    kind: str = "mvit"


def key_pixels(cfg: MViTConfig) -> list[int]:
    """Per block: input pixels per side of a key cell (the cells of the grid it reads, times
    its key stride)."""
    out, seen = [], set()
    for p in cfg.blocks():
        first = p.stage not in seen
        seen.add(p.stage)
        if not first:
            px = cfg.stage_stride(p.stage)
        else:
            px = cfg.stage_stride(p.stage - 1) if p.stage else cfg.patch_size
        out.append(px * p.stride_kv[0])
    return out


def analyze_mvit(model_or_loaded: object, image: Any) -> MViTAnalysis:
    """Run an MViTv2 (or a LoadedModel holding one) on ``image``: a normalised tensor (C, H, W)
    or (1, C, H, W), or, with a LoadedModel, anything ``vitviz.imaging.load_image`` opens,
    prepared as the checkpoint's preprocessing says."""
    model = own_model(model_or_loaded, MViT, "analyze_mvit needs an MViTv2")
    cfg = model.config
    given = prepared_input(model_or_loaded, image, cfg.patch_size, "analyze_mvit")
    x = given.x
    if tuple(x.shape[-2:]) != tuple(cfg.image_size):
        raise ValueError(
            f"this MViTv2 takes {cfg.image_size[0]}×{cfg.image_size[1]} images (its relative "
            f"position tables are of that size), got {x.shape[-2]}×{x.shape[-1]}"
        )
    with torch.no_grad():
        out = model.forward_explained(x)
    logits = out.logits[0] if cfg.num_classes else out.logits[0, :0]
    top = int(logits.argmax()) if logits.numel() else -1
    plans = cfg.blocks()
    stage_pixels = [cfg.stage_stride(s) for s in range(cfg.num_stages)]
    return MViTAnalysis(
        **pass_fields(model_or_loaded, model, given, logits, top),
        attentions=[a[0].detach() for a in out.attentions],
        block_stages=[p.stage for p in plans],
        stage_grids=cfg.stage_grids(),
        key_grids=[p.grid_kv for p in plans],
        key_pixels=key_pixels(cfg),
        stage_pixels=stage_pixels,
        num_prefix_tokens=cfg.num_prefix_tokens,
        patch_size=cfg.patch_size,
    )
