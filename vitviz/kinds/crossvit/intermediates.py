"""The intermediates accessor (DESIGN §3) of vitviz's CrossViT.

Attention layers (the head grid's rows) in the order the network runs them
(``CrossViTConfig.layers``): per multi-scale block each branch's ViT blocks, then its two
cross-attention layers. ``heads``: a ViT block's heads (B, heads, 1 + N_b, head_dim), its CLS
first, then its branch's grid row-major; a cross-attention layer's (B, heads, 1, head_dim): its
one token is the CLS that queries (its head grid: no patches, one prefix token). ``blocks``: the
ViT blocks only (a cross-attention block outputs its CLS alone, on no grid), each (B, C, h, w)
on its branch's grid with its CLS as ``block_prefix``. ``block_modules``, ``mlps``: those
blocks; ``projections`` and ``attention_branches``: every layer's output projection (the
cross-attention's too, whose block adds it to the CLS). The heads are read and replaced at the
projections' input (pre-hooks); the pass is the network's own ``forward``; the hooks are
removed when it ends.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from torch import Tensor, nn

from vitviz.kindapi.grids import LayerGrid
from vitviz.kindapi.intermediates import (
    HeadReplacement,
    Intermediates,
)
from vitviz.kinds.crossvit.network import CrossViTNet
from vitviz.kinds.staged_intermediates import (
    PrefixedSites,
    layer_intermediates,
    require_own_network,
)

if TYPE_CHECKING:
    from vitviz.kindapi.feature_sites import LayerChoice


def layer_modules(model: CrossViTNet) -> list[nn.Module]:
    """Each attention layer's block (a ViT block or a cross-attention block), in order."""
    out: list[nn.Module] = []
    for msb in model.blocks:
        for seq in msb.blocks:
            out.extend(seq)
        out.extend(msb.fusion)
    return out


class CrossViTSites(PrefixedSites):
    """A CrossViT's ViT blocks as the staged kinds' kept-outputs code reads them
    (``StagedSites``'s block side): [CLS, its branch's grid row-major]."""

    def __init__(self, model: CrossViTNet) -> None:
        cfg = model.config
        pairs = model.self_blocks()
        blocks = [block for _b, block in pairs]
        projections = [block.attn.proj for block in blocks]
        super().__init__(model, blocks, projections, [block.attn.heads for block in blocks], 1)
        self.branches = [b for b, _block in pairs]
        self.grids = [
            LayerGrid(grid=cfg.grid(b), token_pixels=cfg.token_pixels(b), num_prefix_tokens=1)  # type: ignore[arg-type]
            for b in range(2)
        ]

    def grid(self, block: int) -> LayerGrid:
        return self.grids[self.branches[block]]


def head_grids(model: CrossViTNet) -> list[LayerGrid]:
    """Each attention layer's head grid: its branch's for a ViT block, the CLS alone (no
    patches, one prefix token) for a cross-attention layer."""
    cfg = model.config
    out = []
    for _k, how, b in cfg.layers():
        if how == "self":
            out.append(LayerGrid(cfg.grid(b), cfg.token_pixels(b), 1))  # type: ignore[arg-type]
        else:
            out.append(LayerGrid((0, 0), cfg.token_pixels(1 - b), 1))  # type: ignore[arg-type]
    return out


def crossvit_intermediates(
    model: nn.Module, x: Tensor, replace: HeadReplacement | None = None, logits_only: bool = False
) -> Intermediates:
    """``Intermediates`` of vitviz's CrossViTNet on ``x`` (B, C, S, S); ValueError for another
    network and for a replacement that does not fit (the model keeps no hook)."""
    require_own_network(model, CrossViTNet, "CrossViT")
    sites = CrossViTSites(model)
    return layer_intermediates(
        model,
        sites,
        layer_modules(model),
        head_grids(model),
        x,
        replace,
        logits_only,
        prefixes=sites.prefixes,
    )


def crossvit_tokens_on_grid(
    model: nn.Module, x: Tensor, layer: LayerChoice
) -> Callable[[Tensor, tuple[int, int]], Tensor]:
    """(B, 1 + N, C) tokens of a ViT block (its norms' too) -> (B, C, h, w), the CLS left out
    (DESIGN §5's CAM layers)."""

    def on_grid(tokens: Tensor, grid: tuple[int, int]) -> Tensor:
        patches = tokens[:, 1:]
        return patches.transpose(1, 2).reshape(patches.shape[0], patches.shape[2], *grid)

    return on_grid
