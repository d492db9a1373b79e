"""Rollout, gradient rollout and relevance across a LeViT's attention layers and stages, one row
at a time (docs/methods.md, "Exact definitions": across a LeViT's stages).

A layer b of stage s is either a block on the stage's grid, A_b (heads, N_s, N_s), whose
attention is added to its input (x + attn(x)), or the subsample that starts stage s, A_b
(heads, N_s, N_{s−1}): queries at every other row and column of the previous grid, keys all of
its tokens, and no residual (its output is the attention alone). With M_b the layer's matrix
(fuse_h(A_b); (mean_h(A_b ⊙ ∂y_c/∂A_b))⁺; mean_h((∂y_c/∂A_b ⊙ A_b)⁺)):

- rollout, gradient rollout:  block Ã_b = rownorm(M_b + I),  subsample Ã_b = rownorm(M_b);
                              r ← r·Ã_b
- relevance:                  block r ← r + r·M_b,           subsample r ← r·M_b

(rownorm divides each row by its sum; a row summing to 0 stays 0). The start row is the uniform
row over the last stage's tokens (the mean the head reads) or e_q of the last stage's token q;
the layers run from the last back to the first; the map is r over the first stage's grid,
scaled to max 1 (rollouts) or min-max (relevance). The MLPs pass r unchanged, as every rollout
passes the MLP.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

MODES = ("rollout", "relevance")


def rownorm(m: Tensor) -> Tensor:
    """Each row divided by its sum (a row of zeros stays zeros)."""
    sums = m.sum(dim=-1, keepdim=True)
    return m / torch.where(sums == 0, torch.ones_like(sums), sums)


class LeViTRollout:
    """Per-layer matrices (N_q × N_k) with whether each is a subsample, ready for any start."""

    def __init__(
        self,
        matrices: Sequence[Tensor],
        subsample: Sequence[bool],
        stage_grids: Sequence[tuple[int, int]],
        mode: str = "rollout",
    ) -> None:
        if not matrices:
            raise ValueError("no attention layers were given")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}")
        self.matrices = list(matrices)
        self.subsample = list(subsample)
        self.stage_grids = [tuple(g) for g in stage_grids]
        self.mode = mode

    def start(self, query: int | None) -> Tensor:
        """e_q over the last stage's tokens, or the uniform row (query None)."""
        H, W = self.stage_grids[-1]
        like = self.matrices[-1]
        if query is None:
            return torch.full((H * W,), 1.0 / (H * W), dtype=like.dtype, device=like.device)
        if not 0 <= query < H * W:
            raise ValueError(f"query token {query} out of range for the {H}×{W} grid")
        r = torch.zeros(H * W, dtype=like.dtype, device=like.device)
        r[query] = 1.0
        return r

    def row(self, query: int | None = None) -> Tensor:
        """The row over the first stage's tokens (N_0,) from the last stage's ``query``."""
        r = self.start(query)
        for m, sub in zip(reversed(self.matrices), reversed(self.subsample), strict=True):
            if self.mode == "rollout":
                step = m if sub else m + torch.eye(m.shape[0], dtype=m.dtype, device=m.device)
                r = r @ rownorm(step)
            else:
                r = r @ m if sub else r + r @ m
        return r

    def map(self, query: int | None = None) -> Tensor:
        """The row as a map over the first stage's grid: max 1 (rollouts) or min-max
        (relevance)."""
        r = self.row(query)
        if self.mode == "relevance":
            r = r - r.min()
        peak = r.max().clamp_min(torch.finfo(r.dtype).tiny)
        return (r / peak).reshape(self.stage_grids[0])
