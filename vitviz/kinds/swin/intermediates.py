"""The intermediates accessor (DESIGN §3) of vitviz's Swin: every block's output on its grid
and every head's output before the window attention's projection, on the image grid.

A block's projection reads (B, windows, n, C): the map padded to whole windows and rolled by
the shift, then cut into windows (``windows.partition``). Grid token (y, x) sits in window slot
``WindowLayout.token_slots`` ((y − δ) mod H_p, (x − δ) mod W_p of the padded, rolled map), so
reading each token's slot puts the windows back on the image grid with the cyclic shift undone;
a replacement is written back into the same slots (padding slots, which no token reads after
the block, keep the model's own values).
"""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from vitviz.kindapi.grids import LayerGrid
from vitviz.kindapi.intermediates import HeadReplacement, Intermediates
from vitviz.kinds.staged_intermediates import (
    TokenOrder,
    head_logits,
    model_input,
    staged_intermediates,
)
from vitviz.kinds.swin.attention import window_ids
from vitviz.kinds.swin.network import SwinTransformer
from vitviz.kinds.swin.windows import WindowLayout, slots_on


def window_order(layout: WindowLayout) -> TokenOrder:
    """The token order of a block's windows (B, windows, n, C) against its grid."""

    def gather(x: Tensor) -> Tensor:
        win, slot, _ = slots_on(layout, x.device)
        return x[:, win, slot]  # (B, H·W, C)

    def scatter(x: Tensor, grid: Tensor) -> Tensor:
        win, slot, _ = slots_on(layout, x.device)
        out = x.clone()
        out[:, win, slot] = grid
        return out

    return TokenOrder(gather=gather, scatter=scatter)


class SwinSites:
    """A SwinTransformer's blocks for one pass (``StagedSites``)."""

    def __init__(self, model: SwinTransformer) -> None:
        self.model = model
        self.blocks = model.blocks
        self.projections = [b.attn.proj for b in self.blocks]
        self.head_counts = [b.attn.heads for b in self.blocks]
        self.stages = [s for s, stage in enumerate(model.stages) for _ in stage.blocks]
        self.layouts: list[WindowLayout | None] = [None] * len(self.blocks)

    def _layout(self, b: int, args: tuple[Any, ...]) -> WindowLayout:
        x = args[0]  # (B, H, W, C)
        layout = self.layouts[b] = self.blocks[b].layout((int(x.shape[1]), int(x.shape[2])))
        return layout

    def head_order(self, block: int, args: tuple[Any, ...]) -> TokenOrder:
        return window_order(self._layout(block, args))

    def block_tokens(self, block: int, args: tuple[Any, ...], output: Any) -> Tensor:
        return output[0].permute(0, 3, 1, 2)  # (B, H, W, C) -> (B, C, H, W)

    def block_output(self, block: int, tokens: Tensor, output: Any) -> Any:
        return (tokens.permute(0, 2, 3, 1), *output[1:])

    def grid(self, block: int) -> LayerGrid:
        layout = self.layouts[block]
        assert layout is not None  # set when the block ran
        return LayerGrid(
            grid=tuple(layout.grid),
            token_pixels=int(self.model.config.patch_size) * 2 ** self.stages[block],
            windows=window_ids(layout).numpy().astype("int32"),
        )

    def logits(self, x: Tensor) -> Tensor:
        return head_logits(self.model(x), int(self.model.config.num_classes))


def swin_intermediates(
    model: nn.Module, x: Tensor, replace: HeadReplacement | None = None, logits_only: bool = False
) -> Intermediates:
    """``Intermediates`` of vitviz's SwinTransformer on ``x`` (B, C, H, W); ValueError for
    another network (a Swin opened from a user's file is captured by its softmaxes, not its
    projections) and for a replacement that does not fit."""
    if not isinstance(model, SwinTransformer):
        raise ValueError(
            f"the intermediates accessor needs vitviz's SwinTransformer, got "
            f"{type(model).__name__} (a Swin from a user's file has no such accessor yet)"
        )
    return staged_intermediates(SwinSites(model), model_input(model, x), replace, logits_only)


def swin_tokens_on_grid(tokens: Tensor, grid: tuple[int, int]) -> Tensor:
    """A block's (or its norms') maps (B, H, W, C) -> (B, C, H, W) (DESIGN §5's CAM layers)."""
    if tuple(tokens.shape[1:3]) != tuple(grid):
        raise ValueError(f"a {tuple(tokens.shape[1:3])} map is not on the block's {grid} grid")
    return tokens.permute(0, 3, 1, 2)
