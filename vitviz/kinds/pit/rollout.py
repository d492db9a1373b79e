"""Rollout, gradient rollout and relevance across a PiT's blocks and stages, one row at a time
(docs/methods.md, "Exact definitions": across a PiT's stages).

A block b of stage s attends over its P prefix tokens and the N_s patches of its grid: A_b
(heads, P + N_s, P + N_s), and within a stage the ViT's definitions hold (DESIGN §5):

- rollout:           Ã_b = rownorm(fuse_h(A_b) + I);                  r ← r·Ã_b
- gradient rollout:  Ã_b = rownorm((mean_h(A_b ⊙ ∂y_c/∂A_b))⁺ + I);   r ← r·Ã_b
- relevance:         Ā_b = mean_h((∂y_c/∂A_b ⊙ A_b)⁺);               r ← r + r·Ā_b

Between stages, the pooling makes stage s+1's tokens: prefix token k from prefix token k of
stage s (a Linear on each), a patch from the k × k patches of stage s its depthwise conv
reads (the padding left out). D_s ((P + N_{s+1}) × (P + N_s)) keeps the prefix tokens and
spreads a patch's weight evenly over the patches it reads: r ← r·D_s. The start row is e_CLS
(the ViT's R[CLS, ·], a distilled PiT's too, as a distilled DeiT's) or e_q of the last stage's
patch q; the blocks run from the last back to the first; the map is r over the first stage's
patches, scaled to max 1 (rollouts) or min-max (relevance). Nothing but the row is
multiplied: a step costs O((P + N_s)²).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from vitviz.kinds.pyramid.reduction import Reduction

MODES = ("rollout", "relevance")


class PiTRollout:
    """Per-block matrices ((P + N_s) × (P + N_s): fused attention or a gradient product) with
    the pools between the stages, ready for any start row."""

    def __init__(
        self,
        matrices: Sequence[Tensor],
        block_stages: Sequence[int],
        stage_grids: Sequence[tuple[int, int]],
        pools: Sequence[Reduction],
        prefix: int,
        mode: str = "rollout",
    ) -> None:
        if not matrices:
            raise ValueError("no attention blocks were given")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}")
        self.matrices = list(matrices)
        self.block_stages = list(block_stages)
        self.stage_grids = [tuple(g) for g in stage_grids]
        self.pools = list(pools)  # pools[s]: stage s -> s + 1
        self.prefix = int(prefix)
        self.mode = mode

    def start(self, query: int | None) -> Tensor:
        """Over the last stage's tokens: e_CLS (query None), or e_(P+q)."""
        H, W = self.stage_grids[-1]
        P = self.prefix
        like = self.matrices[-1]
        r = torch.zeros(P + H * W, dtype=like.dtype, device=like.device)
        if query is None:
            r[0] = 1.0
            return r
        if not 0 <= query < H * W:
            raise ValueError(f"query token {query} out of range for the {H}×{W} grid")
        r[P + query] = 1.0
        return r

    def pooled(self, stage: int, r: Tensor) -> Tensor:
        """r over stage+1's tokens -> r·D_stage over stage's tokens."""
        P = self.prefix
        return torch.cat([r[:P], self.pools[stage].spread(r[P:])])

    def row(self, query: int | None = None) -> Tensor:
        """The row over the first stage's tokens (P + N_0,), prefix tokens first."""
        r = self.start(query)
        current = len(self.stage_grids) - 1
        for b in reversed(range(len(self.matrices))):
            s = self.block_stages[b]
            while current > s:
                r = self.pooled(current - 1, r)
                current -= 1
            m = self.matrices[b]
            if self.mode == "rollout":
                mixed = m + torch.eye(m.shape[0], dtype=m.dtype, device=m.device)
                r = r @ (mixed / mixed.sum(dim=-1, keepdim=True))
            else:
                r = r + r @ m
        while current > 0:
            r = self.pooled(current - 1, r)
            current -= 1
        return r

    def map(self, query: int | None = None) -> Tensor:
        """The row's patches as a map over the first stage's grid: max 1 (rollouts) or min-max
        (relevance)."""
        r = self.row(query)[self.prefix :]
        if self.mode == "relevance":
            r = r - r.min()
        peak = r.max().clamp_min(torch.finfo(r.dtype).tiny)
        return (r / peak).reshape(self.stage_grids[0])
