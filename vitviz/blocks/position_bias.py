"""Relative position biases added to the attention scores: the vocabulary of position parts.

Each gives a (heads, N, N) bias for a gh × gw grid of patches after ``prefix`` prefix tokens
(token layout ``[prefix..., patches row-major]``), added to QKᵀ/√d before the softmax:

- a learnt table (BEiT, timm ``RelPosBias``): one row per relative offset (Δrow, Δcol), the
  rows read through ``relative_position_index``; with a CLS token, three more rows (CLS to a
  patch, a patch to CLS, CLS to itself). Held by ``Attention.relative_position_bias_table``.
- an MLP (timm ``RelPosMlp``, mode 'cr'): ``MlpPositionBias``, Linear(2, hidden) → ReLU →
  Linear(hidden, heads) on log-spaced offsets (sign(Δ)·ln(1 + |Δ|) per axis); prefix tokens
  get no bias (zeros). Per layer, or one shared by every layer (timm's ``vit_srelpos_*``).
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


def log_offsets(grid: tuple[int, int]) -> Tensor:
    """(2gh − 1, 2gw − 1, 2) float32: (f(Δrow), f(Δcol)) for Δ from −(g − 1) to g − 1, with
    f(Δ) = sign(Δ)·ln(1 + |Δ|) (timm's 'cr' log coordinates)."""
    gh, gw = grid
    dr = torch.arange(-(gh - 1), gh, dtype=torch.float32)
    dc = torch.arange(-(gw - 1), gw, dtype=torch.float32)
    offsets = torch.stack(torch.meshgrid(dr, dc, indexing="ij"), dim=-1)
    return torch.sign(offsets) * torch.log1p(offsets.abs())


class MlpPositionBias(nn.Module):
    """timm's ``RelPosMlp`` ('cr' mode): the bias (heads, N, N) over ``grid`` after ``prefix``
    prefix tokens, from an MLP on the log offsets of each query-key pair of patches."""

    def __init__(self, heads: int, hidden: int, grid: tuple[int, int], prefix: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(2, hidden)
        self.fc2 = nn.Linear(hidden, heads)
        self.grid, self.prefix = grid, prefix

    def forward(self) -> Tensor:
        offsets = log_offsets(self.grid).to(self.fc1.weight)  # (2gh − 1, 2gw − 1, 2)
        per_offset = self.fc2(F.relu(self.fc1(offsets))).flatten(0, 1)  # (offsets, heads)
        index = table_index(self.grid, cls=False).to(per_offset.device)  # (P, P)
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
