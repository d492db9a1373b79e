"""Which tokens of a finer grid a coarser token is made of: the spatial reduction of a block's
keys and the downsampling between stages, as row-stochastic "spread" matrices.

Every coarse token here is computed from an axis-aligned rectangle of fine tokens (rows
[r0, r1) × columns [c0, c1)): a key of a reduction of stride sr from the sr × sr tokens its
convolution reads; a key of a linear block (AdaptiveAvgPool2d(pool)) from the tokens its pool
cell averages (rows ⌊i·H/pool⌋ to ⌈(i+1)·H/pool⌉); a token of the next stage from the k × k
tokens its downsampling convolution (kernel k, stride s, padding k // 2) reads, zero padding
left out. The spread of coarse token (i, j) is uniform over its rectangle, 1/(rows·cols) on each
fine token, so the spread matrix S (coarse × fine) = S_rows ⊗ S_cols is separable and each row
sums to 1. ``spread`` applies it to a row (coarse,) -> (fine,) in O(fine) without building it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


def intervals_matrix(starts: list[int], ends: list[int], size: int) -> Tensor:
    """(n, size) float64: row i is 1/(ends[i] − starts[i]) on [starts[i], ends[i]), 0 elsewhere."""
    out = torch.zeros(len(starts), size, dtype=torch.float64)
    for i, (a, b) in enumerate(zip(starts, ends, strict=True)):
        if not 0 <= a < b <= size:
            raise ValueError(f"interval [{a}, {b}) is not inside 0..{size}")
        out[i, a:b] = 1.0 / (b - a)
    return out


def strided_intervals(size: int, kernel: int, stride: int, padding: int) -> tuple[list, list]:
    """The fine rows each output row of a convolution (kernel, stride, padding) reads, the
    padding left out: (starts, ends)."""
    n = (size + 2 * padding - kernel) // stride + 1
    starts = [max(i * stride - padding, 0) for i in range(n)]
    ends = [min(i * stride - padding + kernel, size) for i in range(n)]
    return starts, ends


def pooled_intervals(size: int, out: int) -> tuple[list, list]:
    """The rows each cell of AdaptiveAvgPool (``out`` cells over ``size``) averages."""
    starts = [(i * size) // out for i in range(out)]
    ends = [-((-(i + 1) * size) // out) for i in range(out)]
    return starts, ends


@dataclass(frozen=True)
class Reduction:
    """A coarse grid made from a fine one: ``rows`` (coarse_h, fine_h) and ``cols`` (coarse_w,
    fine_w) row-stochastic interval matrices (float64). ``fine`` and ``coarse`` grids."""

    rows: Tensor
    cols: Tensor

    @property
    def fine(self) -> tuple[int, int]:
        return int(self.rows.shape[1]), int(self.cols.shape[1])

    @property
    def coarse(self) -> tuple[int, int]:
        return int(self.rows.shape[0]), int(self.cols.shape[0])

    def dense(self) -> Tensor:
        """(coarse_h·coarse_w, fine_h·fine_w) the spread matrix S_rows ⊗ S_cols."""
        return torch.kron(self.rows, self.cols)

    def spread(self, r: Tensor) -> Tensor:
        """r (..., coarse_h·coarse_w) -> r·S (..., fine_h·fine_w)."""
        h, w = self.coarse
        rows, cols = self.rows.to(r), self.cols.to(r)
        m = r.reshape(*r.shape[:-1], h, w)
        out = torch.einsum("...ij,ia,jb->...ab", m, rows, cols)
        return out.reshape(*r.shape[:-1], -1)

    def centres(self, pixels: float) -> Tensor:
        """(coarse_h·coarse_w, 2) centre (y, x) of each coarse token's rectangle in input pixels,
        a fine token being ``pixels`` wide."""
        ys = _middles(self.rows) * pixels
        xs = _middles(self.cols) * pixels
        return torch.stack(torch.meshgrid(ys, xs, indexing="ij"), dim=-1).reshape(-1, 2)


def _middles(m: Tensor) -> Tensor:
    nz = m > 0
    idx = torch.arange(m.shape[1], dtype=torch.float64)
    first = torch.where(nz, idx, torch.inf).amin(dim=1)
    last = torch.where(nz, idx, -torch.inf).amax(dim=1)
    return (first + last + 1) / 2


def identity(grid: tuple[int, int]) -> Reduction:
    H, W = grid
    return Reduction(torch.eye(H, dtype=torch.float64), torch.eye(W, dtype=torch.float64))


def key_reduction(grid: tuple[int, int], sr: int, linear: bool, pool: int) -> Reduction:
    """The keys of a block on a ``grid`` of queries: identity (sr 1, not linear), sr × sr
    squares (a strided convolution), or adaptive-pool cells (linear)."""
    H, W = grid
    if linear:
        return Reduction(
            intervals_matrix(*pooled_intervals(H, pool), H),
            intervals_matrix(*pooled_intervals(W, pool), W),
        )
    if sr == 1:
        return identity(grid)
    return Reduction(
        intervals_matrix(*strided_intervals(H, sr, sr, 0), H),
        intervals_matrix(*strided_intervals(W, sr, sr, 0), W),
    )


def stage_reduction(
    grid: tuple[int, int], kernel: int, stride: int, overlap: bool = True
) -> Reduction:
    """The next stage's tokens on a stage's ``grid``: each reads the kernel × kernel tokens of
    its downsampling convolution (padding kernel // 2 left out; none where not ``overlap``)."""
    H, W = grid
    pad = kernel // 2 if overlap else 0
    return Reduction(
        intervals_matrix(*strided_intervals(H, kernel, stride, pad), H),
        intervals_matrix(*strided_intervals(W, kernel, stride, pad), W),
    )
