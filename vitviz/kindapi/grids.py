"""Where a model's tokens sit on its input, layer by layer: the geometry every kind describes
and the window, the methods and the accessor read (DESIGN §3). Torch-free at import time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    from torch import Tensor


@dataclass(frozen=True)
class LayerGrid:
    """One attention layer's tokens as the image sees them.

    ``grid`` (h, w) tokens laid row-major after ``num_prefix_tokens`` prefix tokens; each token
    stands for a ``token_pixels`` × ``token_pixels`` square of the model input (top-left at
    (row · token_pixels, col · token_pixels)). ``windows``: (h, w) int32 window id per token where
    the layer attends within windows (a Swin's W-MSA/SW-MSA), None where every token sees every
    other (a ViT).
    """

    grid: tuple[int, int]
    token_pixels: int
    num_prefix_tokens: int = 0
    windows: np.ndarray | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class TokenGeometry:
    """Where each layer's tokens sit on the model input: the one object the hover, the query
    click, the thumbnails, faithfulness's patch order and the overlays read.

    ``grid`` (gh, gw) is the clickable grid, of ``cell_pixels``-pixel cells over the model input
    of ``input_size`` (H, W): a ViT's patch grid, a Swin's first stage. ``layers`` has one
    ``LayerGrid`` per attention layer (a Swin block each). Maps of the method table are (gh, gw).
    """

    input_size: tuple[int, int]
    grid: tuple[int, int]
    cell_pixels: int
    layers: tuple[LayerGrid, ...]

    @property
    def num_prefix_tokens(self) -> int:
        return self.layers[0].num_prefix_tokens if self.layers else 0

    def cell_at(self, y: float, x: float) -> tuple[int, int] | None:
        """The clickable cell (row, col) under input pixel (y, x), None outside the grid."""
        r, c = int(y // self.cell_pixels), int(x // self.cell_pixels)
        if 0 <= r < self.grid[0] and 0 <= c < self.grid[1] and y >= 0 and x >= 0:
            return r, c
        return None

    def cell_from(self, cell: tuple[int, int], other: TokenGeometry) -> tuple[int, int]:
        """This grid's clickable cell at the place of ``other``'s ``cell`` on the same picture:
        the cell holding that cell's centre, each axis read as a fraction of its model input
        (two models of other input sizes or grids see the image scaled); clamped to the grid."""
        (h, w), (oh, ow) = self.input_size, other.input_size
        y = (cell[0] + 0.5) * other.cell_pixels / oh * h
        x = (cell[1] + 0.5) * other.cell_pixels / ow * w
        p = self.cell_pixels
        return min(int(y // p), self.grid[0] - 1), min(int(x // p), self.grid[1] - 1)

    def cell_region(self, cell: tuple[int, int]) -> tuple[int, int, int, int]:
        """(top, left, bottom, right) input pixels of a clickable cell."""
        p = self.cell_pixels
        return cell[0] * p, cell[1] * p, (cell[0] + 1) * p, (cell[1] + 1) * p

    def on_grid(self, map_: Tensor) -> Tensor:
        """A map over the clickable grid, or over a layer's grid (h, w) -> (gh, gw): each cell
        takes the value of the token covering its centre (nearest; the cells of one coarse
        token then tie). ValueError for a map on none of the grids."""
        shape = tuple(map_.shape)
        if shape == tuple(self.grid):
            return map_
        pixels = [g.token_pixels for g in self.layers if tuple(g.grid) == shape]
        if not pixels:
            grids = ", ".join(f"{h}×{w}" for h, w in dict.fromkeys(g.grid for g in self.layers))
            raise ValueError(f"a {shape} map is on none of the model's token grids ({grids})")
        import torch  # here, not at the top: the protocol imports without torch

        p, c = pixels[0], self.cell_pixels

        def covering(cells: int, tokens: int) -> Tensor:
            centres = (torch.arange(cells, dtype=torch.float64) + 0.5) * c
            return torch.clamp((centres // p).long(), max=tokens - 1)

        rows, cols = covering(self.grid[0], shape[0]), covering(self.grid[1], shape[1])
        return map_[rows[:, None], cols[None, :]]

    def token_at(self, layer: int, y: float, x: float) -> int:
        """Index (prefix tokens included) of the token of ``layer`` covering input pixel (y, x),
        clamped to the layer's grid."""
        g = self.layers[layer]
        r = min(max(int(y // g.token_pixels), 0), g.grid[0] - 1)
        c = min(max(int(x // g.token_pixels), 0), g.grid[1] - 1)
        return g.num_prefix_tokens + r * g.grid[1] + c
