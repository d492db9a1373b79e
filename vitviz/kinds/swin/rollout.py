"""Windowed rollout and gradient rollout of a Swin, one row at a time.

Per block, Ã_b = rownorm(fuse_h(Â_b) + I) over the block's real tokens (Â_b: see
``swin_attention``); merging stage s into s+1 is M_s (N_{s+1} × N_s), 1/4 from each of the 2 × 2
tokens a merged token is made of. Start from the uniform row over the last stage's tokens (the
average pool the head reads) or from a chosen query token; r ← r·Ã_b for every block from the
last back to the first, r ← r·M_s at each stage boundary; the map is r over the first stage's
grid, scaled to max 1. Gradient rollout replaces fuse_h(Â_b) by (mean_h(Â_b ⊙ ∂y_c/∂Â_b))⁺.

Ã_b is block-diagonal over windows, so r·Ã_b costs O(N·n) and is never built densely.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from vitviz.explain.fusion import fuse_heads
from vitviz.kinds.swin.attention import from_slots, to_slots, windowed_attention
from vitviz.kinds.swin.windows import WindowLayout


def fused_blocks(
    attentions: Sequence[Tensor],
    layouts: Sequence[WindowLayout],
    fusion: str = "mean",
    heads: Sequence[int] | None = None,
) -> list[Tensor]:
    """fuse_h(Â_b) per block in window order: (windows, n, n), padding rows/columns zero."""
    return [
        fuse_heads(windowed_attention(a, layout), fusion, heads)
        for a, layout in zip(attentions, layouts, strict=True)
    ]


def gradient_blocks(
    attentions: Sequence[Tensor],
    gradients: Sequence[Tensor],
    layouts: Sequence[WindowLayout],
) -> list[Tensor]:
    """(mean_h(Â_b ⊙ ∂y_c/∂Â_b))⁺ per block, (windows, n, n); each gradient paired with its own
    block (the gradient with respect to the captured attention, padding entries dropped)."""
    out = []
    for a, g, layout in zip(attentions, gradients, layouts, strict=True):
        if a.shape != g.shape:
            raise ValueError(f"gradient {tuple(g.shape)} does not match attention {tuple(a.shape)}")
        prod = windowed_attention(a, layout) * windowed_attention(g, layout, renormalise=False)
        out.append(prod.mean(dim=1).clamp_min(0))
    return out


def window_step(
    r: Tensor, fused: Tensor, layout: WindowLayout, inv_sums: Tensor | None = None
) -> Tensor:
    """r·rownorm(F + I) for one block: r (N,) over its grid, F (windows, n, n) -> (N,).
    ``inv_sums``: 1 / row sums of F + I, (windows, n), when already computed."""
    if inv_sums is None:
        inv_sums = 1 / (fused.sum(dim=-1) + 1)
    s = to_slots(r, layout) * inv_sums  # (windows, n)
    out = torch.einsum("wa,wab->wb", s, fused) + s
    return from_slots(out, layout)


def merge_step(r: Tensor, grid: tuple[int, int], merged: tuple[int, int]) -> Tensor:
    """r·M_s: r (N_{s+1},) over the merged grid -> (N_s,) over ``grid``, 1/4 to each of the
    2 × 2 tokens (padding tokens of an odd grid are dropped)."""
    H, W = grid
    Hm, Wm = merged
    if (Hm, Wm) != ((H + 1) // 2, (W + 1) // 2):
        raise ValueError(f"a {Hm}×{Wm} grid is not the merge of a {H}×{W} grid")
    up = r.reshape(Hm, Wm).repeat_interleave(2, 0).repeat_interleave(2, 1)[:H, :W]
    return (up / 4).reshape(H * W)


class PreparedSwinRollout:
    """The per-block matrices F_b of a rollout with their normalisers, ready for any query: a
    query then costs one O(N·n) step per block and a merge per stage boundary."""

    def __init__(
        self,
        matrices: Sequence[Tensor],
        layouts: Sequence[WindowLayout],
        block_stages: Sequence[int],
        stage_grids: Sequence[tuple[int, int]],
    ) -> None:
        if not matrices:
            raise ValueError("no attention blocks were given")
        self.matrices = list(matrices)  # F_b, (windows, n, n)
        self.inv_sums = [1 / (m.sum(dim=-1) + 1) for m in self.matrices]  # (windows, n)
        self.layouts = list(layouts)
        self.block_stages = list(block_stages)
        self.stage_grids = [tuple(g) for g in stage_grids]

    def row(self, query: int | None = None, query_stage: int | None = None) -> Tensor:
        """The rolled-out row over the first stage's tokens, (H_0·W_0,). ``query``: a token of
        stage ``query_stage`` (default the last), start e_q there; None: the uniform row over
        the last stage's tokens."""
        grids = self.stage_grids
        last = len(grids) - 1
        stage = last if query_stage is None else query_stage
        if not 0 <= stage <= last:
            raise ValueError(f"stage {stage} out of range for {last + 1} stages")
        H, W = grids[stage]
        like = self.matrices[0]
        r = torch.zeros(H * W, dtype=like.dtype, device=like.device)
        if query is None:
            if stage != last:
                raise ValueError("the uniform start row is over the last stage's tokens")
            r += 1.0 / (H * W)
        else:
            if not 0 <= query < H * W:
                raise ValueError(f"query token {query} out of range for the {H}×{W} grid")
            r[query] = 1.0
        current = stage
        for b in reversed(range(len(self.matrices))):
            s = self.block_stages[b]
            if s > stage:
                continue
            while current > s:  # stage boundary: r·M
                r = merge_step(r, grids[current - 1], grids[current])
                current -= 1
            r = window_step(r, self.matrices[b], self.layouts[b], self.inv_sums[b])
        return r

    def map(self, query: int | None = None, query_stage: int | None = None) -> Tensor:
        """The row as a map over the first stage's grid (H_0, W_0), scaled to max 1."""
        return _map(self.row(query, query_stage), self.stage_grids[0])


def rollout_row(
    matrices: Sequence[Tensor],
    layouts: Sequence[WindowLayout],
    block_stages: Sequence[int],
    stage_grids: Sequence[tuple[int, int]],
    query: int | None = None,
    query_stage: int | None = None,
) -> Tensor:
    """The rolled-out row over the first stage's tokens, (H_0·W_0,), from the per-block matrices
    F_b (``fused_blocks`` or ``gradient_blocks``); see ``PreparedSwinRollout.row``."""
    prepared = PreparedSwinRollout(matrices, layouts, block_stages, stage_grids)
    return prepared.row(query, query_stage)


def _map(row: Tensor, grid: tuple[int, int]) -> Tensor:
    peak = row.max().clamp_min(torch.finfo(row.dtype).tiny)
    return (row / peak).reshape(grid)


def swin_rollout(
    attentions: Sequence[Tensor],
    layouts: Sequence[WindowLayout],
    block_stages: Sequence[int],
    stage_grids: Sequence[tuple[int, int]],
    fusion: str = "mean",
    heads: Sequence[int] | None = None,
    query: int | None = None,
    query_stage: int | None = None,
) -> Tensor:
    """Windowed attention rollout over the first stage's grid, scaled to max 1: (H_0, W_0)."""
    fused = fused_blocks(attentions, layouts, fusion, heads)
    row = rollout_row(fused, layouts, block_stages, stage_grids, query, query_stage)
    return _map(row, stage_grids[0])


def swin_gradient_rollout(
    attentions: Sequence[Tensor],
    gradients: Sequence[Tensor],
    layouts: Sequence[WindowLayout],
    block_stages: Sequence[int],
    stage_grids: Sequence[tuple[int, int]],
    query: int | None = None,
    query_stage: int | None = None,
) -> Tensor:
    """Windowed gradient rollout over the first stage's grid, scaled to max 1: (H_0, W_0)."""
    mats = gradient_blocks(attentions, gradients, layouts)
    row = rollout_row(mats, layouts, block_stages, stage_grids, query, query_stage)
    return _map(row, stage_grids[0])
