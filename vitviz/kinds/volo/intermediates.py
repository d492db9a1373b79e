"""The intermediates accessor (DESIGN §3) of vitviz's VOLO.

Attention layers (the head grid's rows) in the order the network runs them: the outlookers,
the transformer blocks, the class blocks. ``heads``: an outlooker's (B, heads, H·W, head_dim),
its folded output before the projection on stage 0's grid row-major (a head's slice is that
head's windows folded); a transformer block's (B, heads, N, head_dim) on the half grid; a class
block's (B, heads, 1, head_dim): its one token is the CLS that queries (its head grid: no
patches, one prefix token). ``blocks``: the outlookers and the transformer blocks (a class
block changes the CLS alone), each (B, C, h, w) on its grid, no prefix. ``block_modules``,
``mlps``: those blocks; ``projections`` and ``attention_branches``: every layer's output
projection. The heads are read and replaced at the projections' input (pre-hooks); the pass is
the network's own ``forward``; the hooks are removed when it ends.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from torch import Tensor, nn

from vitviz.kindapi.grids import LayerGrid
from vitviz.kindapi.intermediates import (
    HeadReplacement,
    Intermediates,
)
from vitviz.kinds.staged_intermediates import (
    ROW_MAJOR,
    TokenOrder,
    head_logits,
    layer_intermediates,
    require_own_network,
)
from vitviz.kinds.volo.network import Outlooker, VOLONet

if TYPE_CHECKING:
    from vitviz.kindapi.feature_sites import LayerChoice


class VOLOSites:
    """A VOLO's grid blocks as the staged kinds' kept-outputs code reads them
    (``StagedSites``'s block side)."""

    def __init__(self, model: VOLONet) -> None:
        cfg = model.config
        self.model = model
        self.blocks = model.blocks
        self.outlook = len(model.outlookers)
        self.projections = [b.attn.proj for b in self.blocks]
        self.head_counts = [int(b.attn.heads) for b in self.blocks]
        grids = cfg.stage_grids()
        self.grids = [
            LayerGrid(grid=grids[0], token_pixels=cfg.patch_size, num_prefix_tokens=0),
            LayerGrid(grid=grids[1], token_pixels=2 * cfg.patch_size, num_prefix_tokens=0),
        ]

    def head_order(self, block: int, args: tuple[Any, ...]) -> TokenOrder:
        return ROW_MAJOR

    def block_tokens(self, block: int, args: tuple[Any, ...], output: Any) -> Tensor:
        tokens = output[0]
        if isinstance(self.blocks[block], Outlooker):
            return tokens.permute(0, 3, 1, 2)  # (B, H, W, C) -> (B, C, H, W)
        B, _, C = tokens.shape
        return tokens.transpose(1, 2).reshape(B, C, *self.grid(block).grid)

    def block_output(self, block: int, tokens: Tensor, output: Any) -> Any:
        if isinstance(self.blocks[block], Outlooker):
            return (tokens.permute(0, 2, 3, 1), *output[1:])
        return (tokens.flatten(2).transpose(1, 2), *output[1:])

    def grid(self, block: int) -> LayerGrid:
        return self.grids[0 if block < self.outlook else 1]

    def logits(self, x: Tensor) -> Tensor:
        return head_logits(self.model(x), int(self.model.config.num_classes))


def head_grids(model: VOLONet) -> list[LayerGrid]:
    """Each attention layer's head grid: its block's grid, the CLS alone (no patches, one
    prefix token) for a class block."""
    sites = VOLOSites(model)
    out = [sites.grid(b) for b in range(len(sites.blocks))]
    px = sites.grids[1].token_pixels
    out += [LayerGrid((0, 0), px, 1) for _ in model.post_network]
    return out


def volo_intermediates(
    model: nn.Module, x: Tensor, replace: HeadReplacement | None = None, logits_only: bool = False
) -> Intermediates:
    """``Intermediates`` of vitviz's VOLONet on ``x`` (B, C, H, W); ValueError for another
    network and for a replacement that does not fit (the model keeps no hook)."""
    require_own_network(model, VOLONet, "VOLO")
    sites = VOLOSites(model)
    return layer_intermediates(
        model, sites, model.attention_layers, head_grids(model), x, replace, logits_only
    )


def volo_tokens_on_grid(
    model: nn.Module, x: Tensor, layer: LayerChoice
) -> Callable[[Tensor, tuple[int, int]], Tensor]:
    """A grid block's tokens (its norms' too) -> (B, C, h, w): an outlooker's (B, H, W, C), a
    transformer block's (B, N, C) row-major (DESIGN §5's CAM layers)."""

    def on_grid(tokens: Tensor, grid: tuple[int, int]) -> Tensor:
        if tokens.ndim == 4:
            return tokens.permute(0, 3, 1, 2)
        return tokens.transpose(1, 2).reshape(tokens.shape[0], tokens.shape[2], *grid)

    return on_grid
