"""analyze_pit: one forward pass of a PiT with everything its explanations need.

Logits, probabilities, each block's captured attention (heads, P + N_s, P + N_s) over its
prefix tokens and its stage's grid, the stage grids and the pools between them, and on request
∂y_c/∂A_b for every block (same shapes, each paired with its own block).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from vitviz.kinds.pit.network import PiTViT
from vitviz.kinds.pit.rollout import PiTRollout
from vitviz.kinds.pyramid.reduction import Reduction, intervals_matrix, strided_intervals
from vitviz.kinds.staged_analysis import (
    StagedAnalysis,
    explained_pass,
    method_matrices,
    own_model,
    pass_fields,
    prepared_input,
)


def pool_reduction(grid: tuple[int, int], stride: int) -> Reduction:
    """The next stage's patches on ``grid``: each reads the (stride + 1)² patches of its
    depthwise conv (padding stride // 2, left out)."""
    H, W = grid
    k, pad = stride + 1, stride // 2
    return Reduction(
        intervals_matrix(*strided_intervals(H, k, stride, pad), H),
        intervals_matrix(*strided_intervals(W, k, stride, pad), W),
    )


@dataclass
class PiTAnalysis(StagedAnalysis):
    """What one image did in a PiT (batch of one)."""

    attentions: list[Tensor]  # per block (heads, P + N_s, P + N_s), rows = queries
    block_stages: list[int]  # per block
    stage_grids: list[tuple[int, int]]  # (h_s, w_s) per stage
    pools: list[Reduction]  # per stage boundary s -> s + 1
    stage_pixels: list[int]  # input pixels per side of a token of each stage
    num_prefix_tokens: int  # 1 (CLS) or 2 (CLS, distillation)
    kind: str = "pit"

    _prepared: dict[tuple, PiTRollout] = field(default_factory=dict, repr=False)

    def prepared(self, method: str, fusion: str = "mean") -> PiTRollout:
        """The per-block matrices of ``method`` (rollout, gradient-rollout, relevance)."""
        key = (method, fusion)
        if key not in self._prepared:
            mats, mode = method_matrices(self.attentions, self.gradients, method, fusion)
            self._prepared[key] = PiTRollout(
                mats, self.block_stages, self.stage_grids, self.pools, self.num_prefix_tokens, mode
            )
        return self._prepared[key]


def analyze_pit(
    model_or_loaded: object,
    image: Any,
    gradients: bool = False,
    target_class: int | None = None,
) -> PiTAnalysis:
    """Run a PiT (or a LoadedModel holding one) on ``image``: a normalised tensor (C, H, W) or
    (1, C, H, W), or, with a LoadedModel, anything ``vitviz.imaging.load_image`` opens, prepared
    as the checkpoint's preprocessing says. ``target_class``: the class y_c whose gradients are
    taken (default the top prediction)."""
    model = own_model(model_or_loaded, PiTViT, "analyze_pit needs a PiT")
    cfg = model.config
    given = prepared_input(model_or_loaded, image, cfg.stride, "analyze_pit")
    x = given.x
    out, logits, c, grads = explained_pass(
        model, x, gradients, target_class, capture_attention=True
    )
    grids = [tuple(g) for g in out.stage_grids]
    pools = []
    for s in range(len(grids) - 1):
        red = pool_reduction(grids[s], cfg.pool_stride)
        if red.coarse != grids[s + 1]:
            raise ValueError(
                f"stage {s + 1}'s grid {grids[s + 1]} is not the pooling of {grids[s]}"
            )
        pools.append(red)
    return PiTAnalysis(
        **pass_fields(model_or_loaded, model, given, logits, c),
        attentions=[a[0].detach() for a in out.attentions],
        block_stages=list(out.block_stages),
        stage_grids=grids,
        pools=pools,
        stage_pixels=[cfg.stage_stride(s) for s in range(len(grids))],
        num_prefix_tokens=int(cfg.num_tokens),
        gradients=grads,
        patch_size=int(cfg.stride),
    )
