"""The intermediates accessor (DESIGN §3) of vitviz's TNT: every block's patch-token output on
the patch grid with the CLS token beside it, and every outer head's output before the outer
attention's projection, (B, heads, 1 + N, head_dim): softmax(q·kᵀ / √d)·v, the CLS first, then
the patch grid row-major (the order the block computes in). A replaced head replaces that. The
inner blocks' heads (over each patch's pixel tokens) are not the accessor's layers (DESIGN §5).

Written on the staged kinds' one pass (``staged_intermediates``), as MViTv2's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from torch import Tensor, nn

from vitviz.kindapi.grids import LayerGrid
from vitviz.kindapi.intermediates import HeadReplacement, Intermediates
from vitviz.kinds.staged_intermediates import (
    PrefixedSites,
    prefixed_intermediates,
    require_own_network,
)
from vitviz.kinds.tnt.network import TNT

if TYPE_CHECKING:
    from vitviz.kindapi.feature_sites import LayerChoice


class TNTSites(PrefixedSites):
    """A TNT's blocks for one pass (``StagedSites``): their outer attention's projections,
    [CLS, patches row-major] the second item of a block's output (the first: its pixel
    tokens)."""

    TOKENS_AT = 1

    def __init__(self, model: TNT) -> None:
        cfg = model.config
        blocks = list(model.blocks)
        projections = [b.attn_out.proj for b in blocks]
        super().__init__(model, blocks, projections, [b.attn_out.heads for b in blocks], 1)
        self.layer_grid = LayerGrid(grid=cfg.grid, token_pixels=cfg.patch_size, num_prefix_tokens=1)

    def grid(self, block: int) -> LayerGrid:
        return self.layer_grid


def tnt_intermediates(
    model: nn.Module, x: Tensor, replace: HeadReplacement | None = None, logits_only: bool = False
) -> Intermediates:
    """``Intermediates`` of vitviz's TNT on ``x`` (B, C, H, W); ValueError for another network
    and for a replacement that does not fit."""
    require_own_network(model, TNT, "TNT")
    return prefixed_intermediates(model, TNTSites(model), x, replace, logits_only)


def tnt_tokens_on_grid(
    model: nn.Module, x: Tensor, layer: LayerChoice
) -> Callable[[Tensor, tuple[int, int]], Tensor]:
    """(B, 1 + N, C) tokens of a block's outer part -> (B, C, h, w), the CLS left out."""
    grid = model.config.grid

    def on_grid(tokens: Tensor, _grid: tuple[int, int]) -> Tensor:
        patches = tokens[:, 1:]
        return patches.transpose(1, 2).reshape(patches.shape[0], patches.shape[2], *grid)

    return on_grid
