"""The intermediates accessor (DESIGN §3) of vitviz's LeViT: every attention layer's block
output on its stage's grid (a subsample block's on the new, coarser grid) and every head's
output before its projection (B, heads, N_q, value width), row-major on the queries' grid (the
order the network computes in: nothing to permute). No prefix tokens.

Written on the staged kinds' one pass (``staged_intermediates``): its hooks read and replace
the heads at each layer's ``proj`` (the activation, then Linear + BatchNorm: a zeroed head
stays zero through the Hardswish or SiLU) and read each block's output.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from torch import Tensor, nn

from vitviz.kindapi.grids import LayerGrid
from vitviz.kindapi.intermediates import HeadReplacement, Intermediates
from vitviz.kinds.levit.network import LeViTNet
from vitviz.kinds.staged_intermediates import (
    ROW_MAJOR,
    TokenOrder,
    head_logits,
    model_input,
    require_own_network,
    staged_intermediates,
)

if TYPE_CHECKING:
    from vitviz.kindapi.feature_sites import LayerChoice

# the conv layout's projection input (B, C, h, w) <-> (B, N, C) row-major (handed back
# contiguous, as the network made it: a conv's kernel, so its rounding, follows the layout)
CHANNELS_FIRST = TokenOrder(
    gather=lambda x: x.flatten(2).transpose(1, 2),
    scatter=lambda x, g: g.transpose(1, 2).reshape(x.shape).contiguous(),
)


class LeViTSites:
    """A LeViT's attention layers for one pass (``StagedSites``)."""

    def __init__(self, model: LeViTNet) -> None:
        cfg = model.config
        self.model = model
        self.blocks = model.blocks
        self.projections = [b.attn.proj for b in self.blocks]
        self.head_counts = cfg.layer_heads
        self.conv = bool(cfg.conv)
        grids = cfg.stage_grids()
        self.layer_grids = [
            LayerGrid(grid=grids[s], token_pixels=cfg.stage_stride(s)) for s in cfg.layer_stages
        ]

    def head_order(self, block: int, args: tuple[Any, ...]) -> TokenOrder:
        return CHANNELS_FIRST if self.conv else ROW_MAJOR

    def block_tokens(self, block: int, args: tuple[Any, ...], output: Any) -> Tensor:
        tokens = output[0]  # (B, N, C); the conv layout's (B, C, h, w) already
        if self.conv:
            return tokens
        B, _, C = tokens.shape
        return tokens.transpose(1, 2).reshape(B, C, *self.layer_grids[block].grid)

    def block_output(self, block: int, tokens: Tensor, output: Any) -> Any:
        return (tokens if self.conv else tokens.flatten(2).transpose(1, 2), *output[1:])

    def grid(self, block: int) -> LayerGrid:
        return self.layer_grids[block]

    def logits(self, x: Tensor) -> Tensor:
        return head_logits(self.model(x), int(self.model.config.num_classes))


def levit_sites(model: nn.Module) -> LeViTSites | None:
    return LeViTSites(model) if isinstance(model, LeViTNet) else None


def levit_intermediates(
    model: nn.Module, x: Tensor, replace: HeadReplacement | None = None, logits_only: bool = False
) -> Intermediates:
    """``Intermediates`` of vitviz's LeViTNet on ``x`` (B, C, H, W); ValueError for another
    network and for a replacement that does not fit."""
    require_own_network(model, LeViTNet, "LeViTNet")
    return staged_intermediates(LeViTSites(model), model_input(model, x), replace, logits_only)


def levit_tokens_on_grid(
    model: nn.Module, x: Tensor, layer: LayerChoice
) -> Callable[[Tensor, tuple[int, int]], Tensor]:
    """(B, N, C) tokens of a block's part -> (B, C, h, w) row-major on the block's grid (the
    conv layout's are (B, C, h, w) already); a
    subsample block's ``attn_downsample.kv`` side reads the stage before's grid, which no
    part named here gives (its attention, its MLP and its output are on the new grid)."""

    def on_grid(tokens: Tensor, grid: tuple[int, int]) -> Tensor:
        if tokens.ndim == 4:  # the conv layout's (B, C, h, w)
            return tokens
        return tokens.transpose(1, 2).reshape(tokens.shape[0], tokens.shape[2], *grid)

    return on_grid
