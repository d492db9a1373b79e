"""analyze_pyramid: one forward pass of a pyramid ViT with everything its explanations need.

Logits, probabilities, each block's captured attention (heads, N_q, N_kv) with its key
reduction, the stage grids and the downsamplings between them, and on request ∂y_c/∂A_b for
every block (same shapes, each paired with its own block). A PVT v1's last-stage blocks attend
among its CLS token and the grid: (heads, 1 + N, 1 + N), the CLS first (``prefix`` per block).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from vitviz.kinds.pyramid.hiera_network import HieraViT
from vitviz.kinds.pyramid.hiera_plan import hiera_plan
from vitviz.kinds.pyramid.layers import window_ids
from vitviz.kinds.pyramid.network import PyramidViT
from vitviz.kinds.pyramid.reduction import Reduction, identity, key_reduction, stage_reduction
from vitviz.kinds.pyramid.rollout import (
    PreparedPyramidRollout,
    fused_blocks,
    gradient_blocks,
    relevance_blocks,
)
from vitviz.kinds.staged_analysis import (
    StagedAnalysis,
    own_model,
    pass_fields,
    prepared_input,
)


@dataclass
class PyramidAnalysis(StagedAnalysis):
    """What one image did in a pyramid ViT (batch of one)."""

    attentions: list[Tensor]  # per block (heads, P_b + N_s, P_b + M_b), rows = queries
    block_stages: list[int]  # per block
    stage_grids: list[tuple[int, int]]  # (H_s, W_s) per stage
    keys: list[Reduction]  # per block: its keys on its stage's grid
    stages: list[Reduction]  # per stage boundary s -> s + 1
    stage_pixels: list[int]  # input pixels per side of a token of each stage
    reductions: list[str]  # per block, in words ("keys 2×2 (sr 4)")
    residuals: list[Reduction | None] | None = None  # per block: a pooling block's (Hiera)
    windows: list[Any] | None = None  # per block (H_s, W_s) int32 mask unit ids or None (Hiera)
    kind: str = "pyramid"
    prefix: list[int] = field(default_factory=list)  # per block its CLS tokens (PVT v1's last
    # stage: 1), first in its rows and columns; [] or 0: none

    _prepared: dict[tuple, PreparedPyramidRollout] = field(default_factory=dict, repr=False)

    def prefix_of(self, block: int) -> int:
        """Block ``block``'s prefix (CLS) tokens, first in its attention's rows and columns."""
        return self.prefix[block] if self.prefix else 0

    def prepared(self, method: str, fusion: str = "mean") -> PreparedPyramidRollout:
        """The per-block matrices of ``method`` (rollout, gradient-rollout, relevance)."""
        key = (method, fusion)
        if key not in self._prepared:
            if method == "rollout":
                mats, mode = fused_blocks(self.attentions, fusion), "rollout"
            else:
                if self.gradients is None:
                    raise ValueError(f"{method} needs the analysis run with gradients=True")
                if method == "gradient-rollout":
                    mats, mode = gradient_blocks(self.attentions, self.gradients), "rollout"
                else:
                    mats, mode = relevance_blocks(self.attentions, self.gradients), "relevance"
            self._prepared[key] = PreparedPyramidRollout(
                mats, self.keys, self.block_stages, self.stage_grids, self.stages, mode,
                self.residuals, self.prefix,
            )  # fmt: skip
        return self._prepared[key]


def describe_keys(keys: Reduction, sr: int, linear: bool) -> str:
    """The block's key reduction in words."""
    h, w = keys.coarse
    if linear:
        return f"keys pooled to {h}×{w} (linear SRA: adaptive average pool, 1×1 conv)"
    if sr == 1:
        return f"keys: every token ({h}×{w}, no reduction)"
    return f"keys {h}×{w} (spatial reduction sr {sr}: a {sr}×{sr} conv of stride {sr})"


def _svt_windows(cfg: Any, grids: list[tuple[int, int]], block_stages: list[int]) -> list | None:
    """Per block the (H_s, W_s) int32 window ids of a Twins-SVT's grouped blocks (None: global);
    None for a model without windows."""
    if not cfg.windows:
        return None
    out = []
    for b, s in enumerate(block_stages):
        ws = cfg.window(s, b - block_stages.index(s))
        out.append(window_ids(grids[s], ws).numpy().astype(np.int32) if ws else None)
    return out


def _pvt_plan(
    cfg: Any, grids: list[tuple[int, int]], block_stages: list[int]
) -> tuple[list[Reduction], list[str], list[Reduction]]:
    """A PVT v2's keys and their words per block, and its downsamplings between stages."""
    keys, words = [], []
    for b, s in enumerate(block_stages):
        ws = cfg.window(s, b - block_stages.index(s))
        if ws:  # Twins-SVT's grouped block: every token of its window is a key
            keys.append(identity(grids[s]))
            words.append(f"attention within {ws}×{ws} windows")
            continue
        sr = cfg.sr_ratios[s]
        k = key_reduction(grids[s], sr, cfg.linear, cfg.pool_size)
        keys.append(k)
        words.append(describe_keys(k, sr, cfg.linear))
    stages = []
    for s in range(len(grids) - 1):
        red = stage_reduction(grids[s], cfg.down_kernel, cfg.down_stride, cfg.embed_overlap)
        if red.coarse != grids[s + 1]:
            raise ValueError(
                f"stage {s + 1}'s grid {grids[s + 1]} is not the downsampling of {grids[s]}"
            )
        stages.append(red)
    return keys, words, stages


def analyze_pyramid(
    model_or_loaded: object,
    image: Any,
    gradients: bool = False,
    target_class: int | None = None,
) -> PyramidAnalysis:
    """Run a pyramid ViT (or a LoadedModel holding one) on ``image``: a normalised tensor
    (C, H, W) or (1, C, H, W), or, with a LoadedModel, anything ``vitviz.imaging.load_image``
    opens, prepared as the checkpoint's preprocessing says. ``target_class``: the class y_c
    whose gradients are taken (default the top prediction)."""
    model = own_model(
        model_or_loaded, (PyramidViT, HieraViT), "analyze_pyramid needs a pyramid ViT"
    )
    cfg = model.config
    given = prepared_input(model_or_loaded, image, cfg.patch_size, "analyze_pyramid")
    x = given.x
    with torch.set_grad_enabled(gradients):
        if gradients:
            x = x.detach().requires_grad_(True)
        out = model.forward_explained(x, capture_attention=True)
        logits = out.logits[0]
        c = int(logits.argmax()) if target_class is None else int(target_class)
        if gradients and not 0 <= c < logits.shape[0]:
            raise ValueError(f"class {c} out of range for {logits.shape[0]} classes")
        grads = None
        if gradients:
            grads = [g[0].detach() for g in torch.autograd.grad(logits[c], out.attentions)]
    grids = [tuple(g) for g in out.stage_grids]
    attentions = [a.detach() for a in out.attentions]
    # as computed (Hiera: unrolled, per mask unit; Twins-SVT: per window) -> over the grids
    attentions = [model.grid_attention(b, a, grids[0]) for b, a in enumerate(attentions)]
    if grads is not None:
        grads = [model.grid_attention(b, g[None], grids[0])[0] for b, g in enumerate(grads)]
    residuals = windows = None
    if isinstance(model, HieraViT):
        plan = hiera_plan(model, grids)
        keys, words, stages = plan.keys, plan.words, plan.stages
        residuals, windows = plan.residuals, plan.windows
    else:
        keys, words, stages = _pvt_plan(cfg, grids, out.block_stages)
        windows = _svt_windows(cfg, grids, out.block_stages)
    last = len(grids) - 1
    prefix = [int(cfg.cls_last and s == last) for s in out.block_stages] if (
        isinstance(model, PyramidViT)
    ) else []  # fmt: skip
    for a, k, p in zip(attentions, keys, prefix or [0] * len(keys), strict=True):
        if a.shape[-1] != p + k.coarse[0] * k.coarse[1]:
            raise ValueError(f"attention {tuple(a.shape)} does not have the {k.coarse} keys")
    return PyramidAnalysis(
        **pass_fields(model_or_loaded, model, given, logits, c),
        attentions=[a[0] for a in attentions],
        block_stages=list(out.block_stages),
        stage_grids=grids,
        keys=keys,
        stages=stages,
        stage_pixels=[cfg.stage_stride(s) for s in range(len(grids))],
        reductions=words,
        gradients=grads,
        residuals=residuals,
        windows=windows,
        patch_size=int(cfg.patch_size),
        prefix=prefix,
    )
