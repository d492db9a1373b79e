"""The intermediates accessor (DESIGN §3) of vitviz's PiT: every block's output on its stage's
grid with its prefix tokens beside it, and every head's output before the attention's
projection, (B, heads, P + N_s, head_dim), prefix tokens first, then the stage's grid
row-major (the order the block computes in: nothing to permute).

Written on the staged kinds' one pass (``staged_intermediates``): its hooks read and replace
the heads at each block's ``attn.proj`` and read each block's output; this module's sites put a
block's patches on the grid and keep its prefix tokens, handing the network the same tensors
back (so gradients reach both).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from torch import Tensor, nn

from vitviz.kindapi.grids import LayerGrid
from vitviz.kindapi.intermediates import HeadReplacement, Intermediates
from vitviz.kinds.pit.network import PiTViT
from vitviz.kinds.staged_intermediates import (
    PrefixedSites,
    prefixed_intermediates,
    require_own_network,
)

if TYPE_CHECKING:
    from vitviz.kindapi.feature_sites import LayerChoice


class PiTSites(PrefixedSites):
    """A PiT's blocks for one pass (``StagedSites``): [prefix, stage grid row-major]."""

    def __init__(self, model: PiTViT) -> None:
        cfg = model.config
        blocks = model.blocks
        prefix = int(cfg.num_tokens)
        super().__init__(
            model, blocks, [b.attn.proj for b in blocks], [b.attn.heads for b in blocks], prefix
        )
        grids = cfg.stage_grids()
        stages = [s for s, d in enumerate(cfg.depths) for _ in range(d)]
        self.layer_grids = [
            LayerGrid(grid=grids[s], token_pixels=cfg.stage_stride(s), num_prefix_tokens=prefix)
            for s in stages
        ]

    def grid(self, block: int) -> LayerGrid:
        return self.layer_grids[block]


def pit_intermediates(
    model: nn.Module, x: Tensor, replace: HeadReplacement | None = None, logits_only: bool = False
) -> Intermediates:
    """``Intermediates`` of vitviz's PiTViT on ``x`` (B, C, H, W); ValueError for another
    network and for a replacement that does not fit. ``logits_only``: nothing kept but the
    logits (the staged accessor's)."""
    require_own_network(model, PiTViT, "PiTViT")
    return prefixed_intermediates(model, PiTSites(model), x, replace, logits_only)


def pit_tokens_on_grid(
    model: nn.Module, x: Tensor, layer: LayerChoice
) -> Callable[[Tensor, tuple[int, int]], Tensor]:
    """(B, P + N, C) tokens of a block (its norms' too) -> (B, C, h, w), the prefix left out
    (DESIGN §5's CAM layers)."""
    prefix = int(model.config.num_tokens)

    def on_grid(tokens: Tensor, grid: tuple[int, int]) -> Tensor:
        patches = tokens[:, prefix:]
        return patches.transpose(1, 2).reshape(patches.shape[0], patches.shape[2], *grid)

    return on_grid
