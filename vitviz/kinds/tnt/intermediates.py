"""The intermediates accessor (DESIGN §3) of vitviz's TNT: every block's patch-token output on
the patch grid with the CLS token beside it, and every outer head's output before the outer
attention's projection, (B, heads, 1 + N, head_dim): softmax(q·kᵀ / √d)·v, the CLS first, then
the patch grid row-major (the order the block computes in). A replaced head replaces that. The
inner blocks' heads (over each patch's pixel tokens) are not the accessor's layers (DESIGN §5).

Written on the staged kinds' one pass (``staged_intermediates``), as MViTv2's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from vitviz.kindapi.grids import LayerGrid
from vitviz.kindapi.intermediates import HeadReplacement, Intermediates
from vitviz.kinds.staged_intermediates import (
    ROW_MAJOR,
    TokenOrder,
    head_logits,
    model_input,
    staged_intermediates,
)
from vitviz.kinds.tnt.network import TNT

if TYPE_CHECKING:
    from vitviz.kindapi.feature_sites import LayerChoice


class TNTSites:
    """A TNT's blocks for one pass (``StagedSites``): their outer attention's projections."""

    def __init__(self, model: TNT) -> None:
        cfg = model.config
        self.model = model
        self.blocks = list(model.blocks)
        self.projections = [b.attn_out.proj for b in self.blocks]
        self.head_counts = [b.attn_out.heads for b in self.blocks]
        self.prefix = 1
        self.layer_grid = LayerGrid(grid=cfg.grid, token_pixels=cfg.patch_size, num_prefix_tokens=1)
        self.prefixes: list[Tensor | None] = [None] * len(self.blocks)

    def head_order(self, block: int, args: tuple[Any, ...]) -> TokenOrder:
        return ROW_MAJOR  # [CLS, patches row-major], as the accessor lays heads out

    def block_tokens(self, block: int, args: tuple[Any, ...], output: Any) -> Tensor:
        tokens = output[1]  # (B, 1 + N, C)
        self.prefixes[block] = tokens[:, :1]
        B, _, C = tokens.shape
        return tokens[:, 1:].transpose(1, 2).reshape(B, C, *self.layer_grid.grid)

    def block_output(self, block: int, tokens: Tensor, output: Any) -> Any:
        prefix = self.prefixes[block]
        assert prefix is not None  # kept by block_tokens just before
        merged = torch.cat([prefix, tokens.flatten(2).transpose(1, 2)], dim=1)
        return (output[0], merged, *output[2:])

    def grid(self, block: int) -> LayerGrid:
        return self.layer_grid

    def logits(self, x: Tensor) -> Tensor:
        return head_logits(self.model(x), int(self.model.config.num_classes))


def tnt_intermediates(
    model: nn.Module, x: Tensor, replace: HeadReplacement | None = None, logits_only: bool = False
) -> Intermediates:
    """``Intermediates`` of vitviz's TNT on ``x`` (B, C, H, W); ValueError for another network
    and for a replacement that does not fit."""
    if not isinstance(model, TNT):
        raise ValueError(
            f"the intermediates accessor needs vitviz's TNT, got {type(model).__name__}"
        )
    sites = TNTSites(model)
    out = staged_intermediates(sites, model_input(model, x), replace, logits_only)
    if logits_only:
        return out
    prefixes = tuple(p for p in sites.prefixes if p is not None)
    return dataclasses.replace(out, block_prefix=prefixes)


def tnt_tokens_on_grid(
    model: nn.Module, x: Tensor, layer: LayerChoice
) -> Callable[[Tensor, tuple[int, int]], Tensor]:
    """(B, 1 + N, C) tokens of a block's outer part -> (B, C, h, w), the CLS left out."""
    grid = model.config.grid

    def on_grid(tokens: Tensor, _grid: tuple[int, int]) -> Tensor:
        patches = tokens[:, 1:]
        return patches.transpose(1, 2).reshape(patches.shape[0], patches.shape[2], *grid)

    return on_grid
