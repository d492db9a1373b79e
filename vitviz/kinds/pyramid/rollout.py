"""Rollout, gradient rollout and relevance across a pyramid ViT's blocks and stages, one row at a
time (docs/methods.md, "Exact definitions": across a pyramid's stages).

A block b of stage s attends from the N_s tokens of its grid to M_b reduced keys: A_b (heads,
N_s, M_b). Each key is made of a rectangle of the block's tokens (``reduction``: its sr × sr
square, or its adaptive-pool cell); K_b (M_b × N_s) spreads a key's weight evenly over them
(rows sum to 1). So the block mixes its tokens by F_b·K_b (N_s × N_s), and:

- rollout:           Ã_b = rownorm(fuse_h(A_b)·K_b + I);              r ← r·Ã_b
- gradient rollout:  Ã_b = rownorm((mean_h(A_b ⊙ ∂y_c/∂A_b))⁺·K_b + I); r ← r·Ã_b
- relevance:         Ā_b = mean_h((∂y_c/∂A_b ⊙ A_b)⁺)·K_b;            r ← r + r·Ā_b

(rownorm divides each row by its sum; the rows of F·K sum as those of F). A block whose queries
are pooled (Hiera's first block of a stage: queries and residual max-pooled 2 × 2 from the
previous stage's tokens) is a stage step itself: its keys are the previous stage's tokens and its
residual R_b (N_{s} × N_{s−1}) spreads each token evenly over the 2 × 2 tokens it was pooled from
(a convention: max is not linear), in place of I:

- rollout:           Ã_b = rownorm(fuse_h(A_b)·K_b + R_b);            r ← r·Ã_b
- relevance:         r ← r·R_b + r·Ā_b

and no stage step D follows it. Hiera's mask-unit attention (and Twins-SVT's ws × ws window
attention) needs no step of its own: A_b is 0 outside each query's mask unit (window).
Between stages, a token of stage s+1 is made by the downsampling convolution from the k × k
tokens of stage s it reads; D_s (N_{s+1} × N_s) spreads its weight evenly over them:
r ← r·D_s. The start row is the uniform row over the last stage's tokens (the mean the head
reads) or e_q of the last stage's token q; the blocks run from the last back to the first; the
map is r over the first stage's grid, scaled to max 1 (rollouts) or min-max (relevance).

Token mixing outside attention is not a step: PVT v2's depthwise 3 × 3 convolution inside the
MLP and Twins-PCPVT's position convolution (x + depthwise 3 × 3 conv(x) after a stage's first
block) pass r unchanged, as every rollout passes the MLP (the methods follow attention and the
residual only); transformer attribution, which would need a rule for them, is refused.

A PVT v1's last stage carries a CLS token first (its blocks' A_b are (1 + N) × (1 + N), keys
unreduced): r there runs over [CLS, grid], starting from e_CLS (no query: what the head reads)
or e_q of grid token q; at the stage's entry the CLS's entry is dropped, not spread: the CLS
is a learned parameter, no image token made it (the share that reached it is lost, as a ViT's
rollout drops its CLS column).

Nothing N × N is built: a step costs O(N_s·M_b).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from vitviz.explain.fusion import fuse_heads
from vitviz.kinds.pyramid.reduction import Reduction

MODES = ("rollout", "relevance")


def fused_blocks(
    attentions: Sequence[Tensor], fusion: str = "mean", heads: Sequence[int] | None = None
) -> list[Tensor]:
    """fuse_h(A_b) per block, (N_s, M_b)."""
    return [fuse_heads(a[None], fusion, heads)[0] for a in attentions]


def gradient_blocks(attentions: Sequence[Tensor], gradients: Sequence[Tensor]) -> list[Tensor]:
    """(mean_h(A_b ⊙ ∂y_c/∂A_b))⁺ per block, (N_s, M_b); each gradient with its own block."""
    return [
        (a * _same(a, g)).mean(dim=0).clamp_min(0)
        for a, g in zip(attentions, gradients, strict=True)
    ]


def relevance_blocks(attentions: Sequence[Tensor], gradients: Sequence[Tensor]) -> list[Tensor]:
    """mean_h((∂y_c/∂A_b ⊙ A_b)⁺) per block, (N_s, M_b)."""
    return [
        (a * _same(a, g)).clamp_min(0).mean(dim=0)
        for a, g in zip(attentions, gradients, strict=True)
    ]


def _same(a: Tensor, g: Tensor) -> Tensor:
    if a.shape != g.shape:
        raise ValueError(f"gradient {tuple(g.shape)} does not match attention {tuple(a.shape)}")
    return g


class PreparedPyramidRollout:
    """Per-block matrices (fused attention or its gradient product, (N_s, M_b)) with their key
    reductions and the stage reductions, ready for any start row."""

    def __init__(
        self,
        matrices: Sequence[Tensor],
        keys: Sequence[Reduction],
        block_stages: Sequence[int],
        stage_grids: Sequence[tuple[int, int]],
        stages: Sequence[Reduction],
        mode: str = "rollout",
        residuals: Sequence[Reduction | None] | None = None,
        prefix: Sequence[int] | None = None,
    ) -> None:
        if not matrices:
            raise ValueError("no attention blocks were given")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}")
        self.matrices = list(matrices)
        self.keys = list(keys)
        self.block_stages = list(block_stages)
        self.stage_grids = [tuple(g) for g in stage_grids]
        self.stages = list(stages)  # stages[s]: stage s -> s + 1
        self.mode = mode
        self.residuals = list(residuals) if residuals is not None else [None] * len(self.matrices)
        self.inv_sums = [1 / (m.sum(dim=-1) + 1) for m in self.matrices]
        self.prefix = list(prefix) if prefix else [0] * len(self.matrices)  # CLS first (PVT v1)

    def start(self, query: int | None) -> Tensor:
        """e_q over the last stage's tokens, or the uniform row (query None); with a CLS first
        (PVT v1) over [CLS, tokens], e_CLS for query None."""
        H, W = self.stage_grids[-1]
        P = self.prefix[-1]
        like = self.matrices[0]
        r = torch.zeros(P + H * W, dtype=like.dtype, device=like.device)
        if query is None:
            if P:
                r[0] = 1.0
                return r
            return r + 1.0 / (H * W)
        if not 0 <= query < H * W:
            raise ValueError(f"query token {query} out of range for the {H}×{W} grid")
        r[P + query] = 1.0
        return r

    def row(self, query: int | None = None) -> Tensor:
        """The row over the first stage's tokens (H_0·W_0,) from the last stage's ``query``."""
        r = self.start(query)
        current = len(self.stage_grids) - 1
        for b in reversed(range(len(self.matrices))):
            s = self.block_stages[b]
            while current > s:
                r = self.stages[current - 1].spread(self._entry(r, current))
                current -= 1
            mixed = self._keys(b)
            residual = self.residuals[b]
            keep = (lambda t: t) if residual is None else residual.spread
            if self.mode == "rollout":
                scaled = r * self.inv_sums[b]
                r = mixed(scaled @ self.matrices[b]) + keep(scaled)
            else:
                r = keep(r) + mixed(r @ self.matrices[b])
            if residual is not None:
                current = s - 1  # the pooling block took r to the previous stage
        while current > 0:
            r = self.stages[current - 1].spread(self._entry(r, current))
            current -= 1
        return self._entry(r, 0)

    def _stage_prefix(self, stage: int) -> int:
        stages = zip(self.prefix, self.block_stages, strict=True)
        return next((p for p, s in stages if s == stage), 0)

    def _entry(self, r: Tensor, stage: int) -> Tensor:
        """r at ``stage``'s entry over its grid: a CLS's entry dropped (PVT v1)."""
        return r[self._stage_prefix(stage) :]

    def _keys(self, b: int) -> Any:
        """Block ``b``'s key spread over [prefix, keys] -> [prefix, tokens]."""
        spread, P = self.keys[b].spread, self.prefix[b]
        if not P:
            return spread
        return lambda t: torch.cat([t[..., :P], spread(t[..., P:])], dim=-1)

    def map(self, query: int | None = None) -> Tensor:
        """The row as a map over the first stage's grid: max 1 (rollout) or min-max (relevance)."""
        r = self.row(query)
        if self.mode == "relevance":
            r = r - r.min()
        peak = r.max().clamp_min(torch.finfo(r.dtype).tiny)
        return (r / peak).reshape(self.stage_grids[0])
