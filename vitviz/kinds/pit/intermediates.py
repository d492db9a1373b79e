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

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from vitviz.kindapi.grids import LayerGrid
from vitviz.kindapi.intermediates import HeadReplacement, Intermediates
from vitviz.kinds.pit.network import PiTViT
from vitviz.kinds.staged_intermediates import (
    ROW_MAJOR,
    TokenOrder,
    head_logits,
    model_input,
    staged_intermediates,
)

if TYPE_CHECKING:
    from vitviz.kindapi.feature_sites import LayerChoice


class PiTSites:
    """A PiT's blocks for one pass (``StagedSites``)."""

    def __init__(self, model: PiTViT) -> None:
        cfg = model.config
        self.model = model
        self.blocks = model.blocks
        self.projections = [b.attn.proj for b in self.blocks]
        self.head_counts = [b.attn.heads for b in self.blocks]
        self.prefix = int(cfg.num_tokens)
        grids = cfg.stage_grids()
        stages = [s for s, d in enumerate(cfg.depths) for _ in range(d)]
        self.layer_grids = [
            LayerGrid(
                grid=grids[s], token_pixels=cfg.stage_stride(s), num_prefix_tokens=self.prefix
            )
            for s in stages
        ]
        self.prefixes: list[Tensor | None] = [None] * len(self.blocks)

    def head_order(self, block: int, args: tuple[Any, ...]) -> TokenOrder:
        return ROW_MAJOR  # [prefix, patches row-major], as the accessor lays heads out

    def block_tokens(self, block: int, args: tuple[Any, ...], output: Any) -> Tensor:
        tokens = output[0]  # (B, P + N, C)
        self.prefixes[block] = tokens[:, : self.prefix]
        B, _, C = tokens.shape
        return tokens[:, self.prefix :].transpose(1, 2).reshape(B, C, *self.layer_grids[block].grid)

    def block_output(self, block: int, tokens: Tensor, output: Any) -> Any:
        prefix = self.prefixes[block]
        assert prefix is not None  # kept by block_tokens just before
        return (torch.cat([prefix, tokens.flatten(2).transpose(1, 2)], dim=1), *output[1:])

    def grid(self, block: int) -> LayerGrid:
        return self.layer_grids[block]

    def logits(self, x: Tensor) -> Tensor:
        return head_logits(self.model(x), int(self.model.config.num_classes))


def pit_intermediates(
    model: nn.Module, x: Tensor, replace: HeadReplacement | None = None, logits_only: bool = False
) -> Intermediates:
    """``Intermediates`` of vitviz's PiTViT on ``x`` (B, C, H, W); ValueError for another
    network and for a replacement that does not fit. ``logits_only``: nothing kept but the
    logits (the staged accessor's)."""
    if not isinstance(model, PiTViT):
        raise ValueError(
            f"the intermediates accessor needs vitviz's PiTViT, got {type(model).__name__}"
        )
    sites = PiTSites(model)
    out = staged_intermediates(sites, model_input(model, x), replace, logits_only)
    if logits_only:
        return out
    prefixes = tuple(p for p in sites.prefixes if p is not None)
    return dataclasses.replace(out, block_prefix=prefixes)


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
