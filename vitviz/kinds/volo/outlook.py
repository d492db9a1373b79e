"""An outlooker's token mixing as rows over stage 0's grid (docs/methods.md, "A VOLO's outlook
attention").

Window w (on the stride-s lattice, padding k // 2) holds W_w (heads, k², k²): rows its output
cells, columns its input cells, both row-major in the k × k neighbourhood. The layer's output at
cell p, before the projection, is Σ_{w ∋ p} Σ_j W_w[o_w(p), j] · v(cell_w(j)) (the fold sums
the windows covering p; an input cell off the grid is the zero padding), so per head the layer
is the linear map M[p, q] = Σ_{w ∋ p, q} W_w[o_w(p), j_w(q)] over the grid's tokens. A
query's map is its row M[p, ·]; without a query, the mean of every cell's row. A row sums to
the count of windows covering p (1 to 4 at k 3, s 2) less what they give the padding.
"""

from __future__ import annotations

import torch
from torch import Tensor


def window_cells(
    grid: tuple[int, int], windows: tuple[int, int], k: int, stride: int, padding: int
) -> Tensor:
    """(L, k²) long: the row-major cell of stage 0's ``grid`` under each window's k × k
    positions (row-major), H·W where it is off the grid (the padding)."""
    H, W = grid
    h, w = windows
    oy = torch.arange(h)[:, None] * stride - padding  # (h, 1) top row of each window
    ox = torch.arange(w)[None, :] * stride - padding
    dy = torch.arange(k).repeat_interleave(k)  # (k²,) offsets of the positions, row-major
    dx = torch.arange(k).repeat(k)
    ys = oy.reshape(-1, 1, 1) + dy.reshape(1, 1, -1)  # (h, 1, k²)
    xs = ox.reshape(1, -1, 1) + dx.reshape(1, 1, -1)  # (1, w, k²)
    ys, xs = torch.broadcast_tensors(ys, xs)
    inside = (ys >= 0) & (ys < H) & (xs >= 0) & (xs < W)
    cells = torch.where(inside, ys * W + xs, torch.full_like(ys, H * W))
    return cells.reshape(h * w, k * k)


def outlook_rows(
    weights: Tensor, cells: Tensor, grid: tuple[int, int], query: int | None
) -> Tensor:
    """(heads, H, W): each head's row M[query, ·] of the outlooker's ``weights`` (heads, L,
    k², k²) over the grid, or (query None) the mean of every cell's row."""
    H, W = grid
    N = H * W
    cells = cells.to(weights.device)
    if query is None:
        picked = (cells < N).to(weights.dtype) / N  # every output cell on the grid
    else:
        if not 0 <= query < N:
            raise ValueError(f"query cell {query} out of range for the {H}×{W} grid")
        picked = (cells == query).to(weights.dtype)  # (L, k²): the windows' cell of the query
    per_input = (weights * picked[None, :, :, None]).sum(dim=2)  # (heads, L, k²)
    heads = weights.shape[0]
    out = weights.new_zeros(heads, N + 1)
    out.index_add_(1, cells.reshape(-1), per_input.reshape(heads, -1))
    return out[:, :N].reshape(heads, H, W)
