"""The intermediates accessor (DESIGN §3) of vitviz's MViTv2: every block's output on its query
grid (its stage's) with the CLS token beside it where the model has one, and every head's output
before the attention's projection, (B, heads, P + Nq, head_dim): softmax(q·kᵀ + bias)·v with
the pooled queries added (residual pooling), the CLS first, then the query grid row-major (the
order the block computes in: nothing to permute). A replaced head replaces that sum (DESIGN §5).

Written on the staged kinds' one pass (``staged_intermediates``), as PiT's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from torch import Tensor, nn

from vitviz.kindapi.grids import LayerGrid
from vitviz.kindapi.intermediates import HeadReplacement, Intermediates
from vitviz.kinds.mvit.network import MViT
from vitviz.kinds.staged_intermediates import (
    PrefixedSites,
    prefixed_intermediates,
    require_own_network,
)

if TYPE_CHECKING:
    from vitviz.kindapi.feature_sites import LayerChoice


def block_grids(model: MViT) -> list[LayerGrid]:
    """Each block's output (query) grid as the image sees it."""
    cfg = model.config
    P = cfg.num_prefix_tokens
    return [
        LayerGrid(grid=p.grid_q, token_pixels=cfg.stage_stride(p.stage), num_prefix_tokens=P)
        for p in cfg.blocks()
    ]


class MViTSites(PrefixedSites):
    """An MViTv2's blocks for one pass (``StagedSites``): [CLS, query grid row-major]."""

    def __init__(self, model: MViT) -> None:
        blocks = model.blocks
        super().__init__(
            model,
            blocks,
            [b.attn.proj for b in blocks],
            [b.attn.heads for b in blocks],
            model.config.num_prefix_tokens,
        )
        self.layer_grids = block_grids(model)

    def grid(self, block: int) -> LayerGrid:
        return self.layer_grids[block]


def mvit_intermediates(
    model: nn.Module, x: Tensor, replace: HeadReplacement | None = None, logits_only: bool = False
) -> Intermediates:
    """``Intermediates`` of vitviz's MViT on ``x`` (B, C, H, W); ValueError for another network
    and for a replacement that does not fit."""
    require_own_network(model, MViT, "MViT")
    return prefixed_intermediates(model, MViTSites(model), x, replace, logits_only)


def mvit_tokens_on_grid(
    model: nn.Module, x: Tensor, layer: LayerChoice
) -> Callable[[Tensor, tuple[int, int]], Tensor]:
    """(B, P + N, C) tokens of a block's part -> (B, C, h, w), the CLS left out: norm1 on the
    grid the block reads, norm2 and the output on its query grid (DESIGN §5's CAM layers)."""
    prefix = int(model.config.num_prefix_tokens)
    plan = model.config.blocks()[layer.block]
    grid = plan.grid_in if layer.part == "norm1" else plan.grid_q

    def on_grid(tokens: Tensor, _grid: tuple[int, int]) -> Tensor:
        patches = tokens[:, prefix:]
        return patches.transpose(1, 2).reshape(patches.shape[0], patches.shape[2], *grid)

    return on_grid
