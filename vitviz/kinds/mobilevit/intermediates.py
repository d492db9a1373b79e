"""The intermediates accessor (DESIGN §3) of vitviz's MobileViT: every transformer layer's
output on its stage's feature grid (B, C, H, W) and every head's output before the attention's
projection, (B, heads, H·W, head_dim), the feature grid's pixels row-major.

A layer computes on (B·P, N, C): sequence b·P + o holds offset o = oy·p + ox of each of the N
patches. This module's sites put those tokens on the pixel grid (pixel (ny·p + oy, nx·p + ox))
and back, handing the network the same tensors (so gradients reach both). A stage whose map
is not a multiple of the patch size (the libraries resize it bilinearly first) is refused: its
tokens are no pixels of the map.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from torch import Tensor, nn

from vitviz.kindapi.grids import LayerGrid
from vitviz.kindapi.intermediates import HeadReplacement, Intermediates
from vitviz.kinds.mobilevit.network import MobileViTNet, fold, unfold
from vitviz.kinds.staged_intermediates import (
    TokenOrder,
    head_logits,
    model_input,
    require_own_network,
    staged_intermediates,
)

if TYPE_CHECKING:
    from vitviz.kindapi.feature_sites import LayerChoice


def pixel_order(p: int, patches: tuple[int, int]) -> TokenOrder:
    """(B·P, N, C) of a layer <-> (B, H·W, C) row-major over its pixel grid."""

    def gather(x: Tensor) -> Tensor:
        grid = fold(x, p, patches)  # (B, C, H, W)
        return grid.flatten(2).transpose(1, 2)

    def scatter(x: Tensor, g: Tensor) -> Tensor:
        B, _, C = g.shape
        return unfold(g.transpose(1, 2).reshape(B, C, patches[0] * p, patches[1] * p), p)

    return TokenOrder(gather=gather, scatter=scatter)


def divisible_grids(model: MobileViTNet, size: tuple[int, int]) -> list[tuple[int, int]]:
    """Each MobileViT block's stage's feature grid at input ``size``; ValueError in one line
    when one is not a multiple of the patch size."""
    cfg = model.config
    p = cfg.patch_size
    grids = []
    for s in cfg.attention_stages:
        h, w = cfg.feature_grid(s, size)
        if h % p or w % p:
            raise ValueError(
                f"at {size[0]}×{size[1]} px this MobileViT's stage {s} map is {h}×{w}, not a "
                f"multiple of its {p}×{p} patches (the library resizes it first, so its tokens "
                "are no pixels of the map); use an input whose stage maps are multiples of it"
            )
        grids.append((h, w))
    return grids


class MobileViTSites:
    """A MobileViT's transformer layers for one pass (``StagedSites``)."""

    def __init__(self, model: MobileViTNet, size: tuple[int, int]) -> None:
        cfg = model.config
        self.model = model
        self.blocks = model.blocks
        self.projections = [b.attn.proj for b in self.blocks]
        self.head_counts = [b.attn.heads for b in self.blocks]
        self.p = int(cfg.patch_size)
        grids = divisible_grids(model, size)
        self.layer_grids: list[LayerGrid] = []
        for s, grid in zip(cfg.attention_stages, grids, strict=True):
            self.layer_grids += [LayerGrid(grid=grid, token_pixels=cfg.stage_stride(s))] * (
                cfg.depths[s]
            )
        self.orders = [
            pixel_order(self.p, (g.grid[0] // self.p, g.grid[1] // self.p))
            for g in self.layer_grids
        ]

    def head_order(self, block: int, args: tuple[Any, ...]) -> TokenOrder:
        return self.orders[block]

    def block_tokens(self, block: int, args: tuple[Any, ...], output: Any) -> Tensor:
        B_C = self.orders[block].gather(output[0])  # (B, H·W, C)
        H, W = self.layer_grids[block].grid
        return B_C.transpose(1, 2).reshape(B_C.shape[0], B_C.shape[2], H, W)

    def block_output(self, block: int, tokens: Tensor, output: Any) -> Any:
        flat = tokens.flatten(2).transpose(1, 2)
        return (self.orders[block].scatter(output[0], flat), *output[1:])

    def grid(self, block: int) -> LayerGrid:
        return self.layer_grids[block]

    def logits(self, x: Tensor) -> Tensor:
        return head_logits(self.model(x), int(self.model.config.num_classes))


def mobilevit_sites(model: nn.Module, x: Tensor) -> MobileViTSites | None:
    """The accessor's sites of vitviz's MobileViTNet for input x (None: another network)."""
    if not isinstance(model, MobileViTNet):
        return None
    return MobileViTSites(model, (int(x.shape[-2]), int(x.shape[-1])))


def mobilevit_intermediates(
    model: nn.Module, x: Tensor, replace: HeadReplacement | None = None, logits_only: bool = False
) -> Intermediates:
    """``Intermediates`` of vitviz's MobileViTNet on ``x`` (B, C, H, W); ValueError for another
    network, a replacement that does not fit, or a stage map that is no multiple of the
    patch."""
    require_own_network(model, MobileViTNet, "MobileViTNet")
    x = model_input(model, x)
    sites = MobileViTSites(model, (int(x.shape[-2]), int(x.shape[-1])))
    return staged_intermediates(sites, x, replace, logits_only)


def mobilevit_tokens_on_grid(
    model: nn.Module, x: Tensor, layer: LayerChoice
) -> Callable[[Tensor, tuple[int, int]], Tensor]:
    """(B·P, N, C) tokens of a transformer layer (its norms' too) -> (B, C, H, W) on its
    stage's pixel grid (DESIGN §5's CAM layers)."""
    p = int(model.config.patch_size)

    def on_grid(tokens: Tensor, grid: tuple[int, int]) -> Tensor:
        return fold(tokens, p, (grid[0] // p, grid[1] // p))

    return on_grid
