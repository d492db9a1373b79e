"""Relative position biases added to the attention scores: the vocabulary of position parts.

Each gives a (heads, N, N) bias for a gh × gw grid of patches after ``prefix`` prefix tokens
(token layout ``[prefix..., patches row-major]``), added to QKᵀ/√d before the softmax:

- a learnt table (BEiT, timm ``RelPosBias``): one row per relative offset (Δrow, Δcol), the
  rows read through ``relative_position_index``; with a CLS token, three more rows (CLS to a
  patch, a patch to CLS, CLS to itself). Held by ``Attention.relative_position_bias_table``.
  On a grid other than the one it was learnt on, the table is resampled first
  (``resample_table``: transformers' BEiT rule, DESIGN §3).
- an MLP (timm ``RelPosMlp``, mode 'cr'): ``MlpPositionBias``, Linear(2, hidden) → ReLU →
  Linear(hidden, heads) on log-spaced offsets (sign(Δ)·ln(1 + |Δ|) per axis); prefix tokens
  get no bias (zeros). Per layer, or one shared by every layer (timm's ``vit_srelpos_*``). On
  another grid it is evaluated at that grid's offsets (what timm's ``set_input_size`` does).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

if TYPE_CHECKING:
    from vitviz.blocks.config import ViTConfig


def relative_position_index(grid: tuple[int, int]) -> Tensor:
    """(N, N) long, N = 1 + gh·gw (CLS first): the row of the bias table each query-key pair
    reads (BEiT's layout). Patch pairs: (Δrow + gh − 1)·(2gw − 1) + (Δcol + gw − 1); the last
    three rows of the table: CLS to a patch, a patch to CLS, CLS to itself."""
    gh, gw = grid
    rows, cols = torch.meshgrid(torch.arange(gh), torch.arange(gw), indexing="ij")
    r, c = rows.flatten(), cols.flatten()
    dr = r[:, None] - r[None, :] + gh - 1
    dc = c[:, None] - c[None, :] + gw - 1
    distances = (2 * gh - 1) * (2 * gw - 1)
    index = torch.empty(1 + gh * gw, 1 + gh * gw, dtype=torch.long)
    index[1:, 1:] = dr * (2 * gw - 1) + dc
    index[0, :] = distances  # CLS to every token
    index[:, 0] = distances + 1  # every token to CLS
    index[0, 0] = distances + 2  # CLS to itself
    return index


def table_rows(grid: tuple[int, int], cls: bool) -> int:
    """Rows of a bias table over ``grid``: every offset, and three more with a CLS token."""
    return (2 * grid[0] - 1) * (2 * grid[1] - 1) + (3 if cls else 0)


def table_index(grid: tuple[int, int], cls: bool) -> Tensor:
    """(N, N) long: ``relative_position_index``, or its patch part without a CLS token."""
    index = relative_position_index(grid)
    return index if cls else index[1:, 1:].contiguous()


def resample_table(
    table: Tensor, old_grid: tuple[int, int], new_grid: tuple[int, int], cls: bool
) -> Tensor:
    """A bias table learnt on ``old_grid`` made one for ``new_grid``, as transformers' BEiT and
    Data2Vec-vision make it at another input size (DESIGN §3): (table_rows(old_grid, cls),
    heads) -> (table_rows(new_grid, cls), heads).

    The offset rows, (2gh − 1)(2gw − 1) of them with Δrow major, are an image of ``heads``
    channels over (Δrow, Δcol); it is resized bilinearly (align_corners=False, no antialias) to
    (2gh' − 1) × (2gw' − 1), in the table's own dtype. The three CLS rows (CLS to a patch, a
    patch to CLS, CLS to itself) are kept as they are, after the offsets. On ``old_grid``
    itself the table is returned unchanged (the resize of an image to its own size).
    transformers reads a table learnt on a non-square grid as (2gw − 1) × (2gh − 1), even at
    its own size; vitviz reads it as learnt, so the library check refuses such a folder."""
    if tuple(old_grid) == tuple(new_grid):
        return table
    extra = 3 if cls else 0
    rows, heads = table.shape
    if rows != table_rows(old_grid, cls):
        raise ValueError(f"a bias table of {rows} rows is not one of a {old_grid} grid")
    h0, w0 = 2 * old_grid[0] - 1, 2 * old_grid[1] - 1
    h1, w1 = 2 * new_grid[0] - 1, 2 * new_grid[1] - 1
    offsets = table[: rows - extra].reshape(1, h0, w0, heads).permute(0, 3, 1, 2)
    offsets = F.interpolate(offsets, size=(h1, w1), mode="bilinear", align_corners=False)
    resized = offsets.permute(0, 2, 3, 1).reshape(h1 * w1, heads)  # (offsets', heads)
    return torch.cat([resized, table[rows - extra :]]) if extra else resized


def log_offsets(grid: tuple[int, int]) -> Tensor:
    """(2gh − 1, 2gw − 1, 2) float32: (f(Δrow), f(Δcol)) for Δ from −(g − 1) to g − 1, with
    f(Δ) = sign(Δ)·ln(1 + |Δ|) (timm's 'cr' log coordinates)."""
    gh, gw = grid
    dr = torch.arange(-(gh - 1), gh, dtype=torch.float32)
    dc = torch.arange(-(gw - 1), gw, dtype=torch.float32)
    offsets = torch.stack(torch.meshgrid(dr, dc, indexing="ij"), dim=-1)
    return torch.sign(offsets) * torch.log1p(offsets.abs())


class MlpPositionBias(nn.Module):
    """timm's ``RelPosMlp`` ('cr' mode): the bias (heads, N, N) over a grid of patches after
    ``prefix`` prefix tokens, from an MLP on the log offsets of each query-key pair of patches.
    ``grid``: the one it was learnt on; any other is evaluated at its own offsets, as timm's
    ``set_window_size`` makes it."""

    def __init__(self, heads: int, hidden: int, grid: tuple[int, int], prefix: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(2, hidden)
        self.fc2 = nn.Linear(hidden, heads)
        self.grid, self.prefix = grid, prefix

    def forward(self, grid: tuple[int, int] | None = None) -> Tensor:
        """(heads, N, N), N = prefix + gh·gw, over ``grid`` (None: the grid learnt on)."""
        grid = self.grid if grid is None else grid
        offsets = log_offsets(grid).to(self.fc1.weight)  # (2gh − 1, 2gw − 1, 2)
        per_offset = self.fc2(F.relu(self.fc1(offsets))).flatten(0, 1)  # (offsets, heads)
        index = table_index(grid, cls=False).to(per_offset.device)  # (P, P)
        P = index.shape[0]
        bias = per_offset[index.view(-1)].view(P, P, -1).permute(2, 0, 1)  # (heads, P, P)
        k = self.prefix
        return F.pad(bias, (k, 0, k, 0)) if k else bias


def shared_position_bias(config: ViTConfig, blocks: Iterable[nn.Module]) -> MlpPositionBias | None:
    """The MLP bias every block's attention reads (``rel_pos_shared``), handed to them; None
    without one."""
    if not (config.rel_pos_bias and config.rel_pos_mlp and config.rel_pos_shared):
        return None
    bias = MlpPositionBias(
        config.heads, config.rel_pos_mlp, config.grid_size, config.num_prefix_tokens
    )
    for block in blocks:
        block.attn.share_position_bias(bias)  # type: ignore[union-attr, operator]
    return bias
