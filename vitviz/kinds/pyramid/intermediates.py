"""The intermediates accessor (DESIGN §3) of the pyramid kind's networks: every block's output
on its stage's grid and every head's output before the attention's projection, row-major.

- PVT v2, Twins-PCPVT (spatial-reduction attention): the queries are every grid token, so the
  projection reads (B, N, C) row-major already; the reduction touches keys and values only.
- Twins-SVT's grouped blocks: the attention puts its ws × ws windows back in grid order before
  the projection, which reads (B, N, C) row-major as well. A block's output is taken before
  the stage's position convolution (Twins' PEG, after a stage's first block), which is no block.
- PVT v1: its last stage's blocks carry the CLS token first; their outputs are given on the
  grid with the CLS beside it (``block_prefix``), their heads [CLS, grid row-major] as computed.
- Hiera: the blocks run on "unrolled" tokens (``hiera_network.unrolled_order``). A block's
  projection reads one row per query in the unrolled order of its output grid (a pooling
  block's queries already 2 × 2 max-pooled; within mask units position t·units + w holds unit
  w's t-th token, which is that order too), so position i is row-major token
  ``unrolled_order(g_out, q, S − 1 − s)[i]`` of the output grid; the block's output tokens are
  in the same order. Every stage maps exactly: each query has one cell of its grid.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor, nn

from vitviz.kindapi.grids import LayerGrid
from vitviz.kindapi.intermediates import HeadReplacement, Intermediates
from vitviz.kinds.pyramid import hiera_network, layers
from vitviz.kinds.pyramid.hiera_network import HieraViT, unrolled_order
from vitviz.kinds.pyramid.network import PyramidViT
from vitviz.kinds.staged_intermediates import (
    ROW_MAJOR,
    TokenOrder,
    head_logits,
    model_input,
    permuted,
    staged_intermediates,
)

if TYPE_CHECKING:
    from vitviz.kindapi.feature_sites import LayerChoice


def _on_grid(tokens: Tensor, grid: tuple[int, int]) -> Tensor:
    """(B, H·W, C) row-major -> (B, C, H, W)."""
    B, _, C = tokens.shape
    return tokens.transpose(1, 2).reshape(B, C, *grid)


def _off_grid(tokens: Tensor) -> Tensor:
    """(B, C, H, W) -> (B, H·W, C) row-major."""
    return tokens.flatten(2).transpose(1, 2)


class PyramidSites:
    """A PVT v2's or Twins' blocks for one pass (``StagedSites``)."""

    def __init__(self, model: PyramidViT) -> None:
        cfg = model.config
        self.model = model
        self.blocks = model.blocks
        self.projections = [b.attn.proj for b in self.blocks]
        self.head_counts = [b.attn.heads for b in self.blocks]
        self.places = [(s, j) for s, d in enumerate(cfg.depths) for j in range(d)]
        self.grids: list[tuple[int, int] | None] = [None] * len(self.blocks)
        last = cfg.num_stages - 1
        self.prefix = [int(cfg.cls_last and s == last) for s, _ in self.places]
        self.prefixes: list[Tensor | None] = [None] * len(self.blocks)

    def head_order(self, block: int, args: tuple[Any, ...]) -> TokenOrder:
        return ROW_MAJOR

    def block_tokens(self, block: int, args: tuple[Any, ...], output: Any) -> Tensor:
        grid = self.grids[block] = tuple(int(v) for v in args[1])  # forward(t, grid, capture)
        P = self.prefix[block]
        self.prefixes[block] = output[0][:, :P]
        return _on_grid(output[0][:, P:], grid)

    def block_output(self, block: int, tokens: Tensor, output: Any) -> Any:
        prefix = self.prefixes[block]
        assert prefix is not None  # kept by block_tokens just before
        return (torch.cat([prefix, _off_grid(tokens)], dim=1), *output[1:])

    def grid(self, block: int) -> LayerGrid:
        cfg = self.model.config
        s, j = self.places[block]
        grid = self.grids[block]
        assert grid is not None  # set when the block ran
        ws = cfg.window(s, j)
        windows = layers.window_ids(grid, ws).numpy().astype(np.int32) if ws else None
        return LayerGrid(
            grid=grid,
            token_pixels=cfg.stage_stride(s),
            windows=windows,
            num_prefix_tokens=self.prefix[block],
        )

    def logits(self, x: Tensor) -> Tensor:
        return head_logits(self.model(x), int(self.model.config.num_classes))


class HieraSites:
    """A Hiera's blocks for one pass on ``x`` (``StagedSites``): the unrolled orders follow
    from the first-stage grid, known before the pass."""

    def __init__(self, model: HieraViT, x: Tensor) -> None:
        cfg = model.config
        self.model = model
        self.blocks = list(model.blocks)
        self.projections = [b.attn.proj for b in self.blocks]
        self.head_counts = [b.attn.heads for b in self.blocks]
        self.grid0 = (x.shape[-2] // cfg.patch_stride, x.shape[-1] // cfg.patch_stride)
        S, q = cfg.num_stages, cfg.q_stride
        self.orders, self.layer_grids = [], []
        for b, s in enumerate(model.block_stages):
            _, windowed, _, g_out = model.block_plan(b, self.grid0)
            self.orders.append(permuted(unrolled_order(g_out, q, S - 1 - s).to(x.device)))
            unit = (cfg.mask_unit[0] // q[0] ** s, cfg.mask_unit[1] // q[1] ** s)
            ids = hiera_network.window_ids(g_out, unit).reshape(g_out).numpy().astype(np.int32)
            self.layer_grids.append(
                LayerGrid(
                    grid=tuple(g_out),
                    token_pixels=cfg.stage_stride(s),
                    windows=ids if windowed else None,
                )
            )

    def head_order(self, block: int, args: tuple[Any, ...]) -> TokenOrder:
        return self.orders[block]

    def block_tokens(self, block: int, args: tuple[Any, ...], output: Any) -> Tensor:
        tokens = self.orders[block].gather(output[0])  # unrolled -> row-major
        return _on_grid(tokens, self.layer_grids[block].grid)

    def block_output(self, block: int, tokens: Tensor, output: Any) -> Any:
        return (self.orders[block].scatter(output[0], _off_grid(tokens)), *output[1:])

    def grid(self, block: int) -> LayerGrid:
        return self.layer_grids[block]

    def logits(self, x: Tensor) -> Tensor:
        return head_logits(self.model(x), int(self.model.config.num_classes))


def pyramid_intermediates(
    model: nn.Module, x: Tensor, replace: HeadReplacement | None = None, logits_only: bool = False
) -> Intermediates:
    """``Intermediates`` of vitviz's PyramidViT (PVT v2, Twins) or HieraViT on ``x``
    (B, C, H, W); ValueError for another network and for a replacement that does not fit."""
    sites = pyramid_sites(model, x)
    if sites is None:
        raise ValueError(
            f"the intermediates accessor needs vitviz's PyramidViT or HieraViT, got "
            f"{type(model).__name__}"
        )
    out = staged_intermediates(sites, model_input(model, x), replace, logits_only)
    if logits_only or not isinstance(sites, PyramidSites) or not any(sites.prefix):
        return out
    return dataclasses.replace(out, block_prefix=tuple(p for p in sites.prefixes if p is not None))


def pyramid_sites(model: nn.Module, x: Tensor) -> PyramidSites | HieraSites | None:
    """The ``StagedSites`` of vitviz's PyramidViT or HieraViT for x (B, C, H, W); None for
    another network."""
    if isinstance(model, HieraViT):
        return HieraSites(model, model_input(model, x))
    if isinstance(model, PyramidViT):
        return PyramidSites(model)
    return None


def pyramid_tokens_on_grid(
    model: nn.Module, x: Tensor, layer: LayerChoice
) -> Callable[[Tensor, tuple[int, int]], Tensor]:
    """(B, N, C) tokens of ``layer`` (resolved) -> (B, C, h, w) on its block's grid: row-major
    for a PVT v2 or Twins; a Hiera's unrolled order undone (DESIGN §5's CAM layers), a pooling
    block's norm1 on the stage before's grid (the tokens it reads)."""
    if not isinstance(model, HieraViT):
        cfg = getattr(model, "config", None)
        last = sum(cfg.depths[:-1]) if cfg is not None else 0
        P = int(bool(getattr(cfg, "cls_last", False)) and layer.block >= last)  # PVT v1's CLS
        return lambda tokens, grid: _on_grid(tokens[:, P:], grid)
    sites = HieraSites(model, model_input(model, x))
    pools, _, g_in, _ = model.block_plan(layer.block, sites.grid0)
    if not (pools and layer.part == "norm1"):
        order = sites.orders[layer.block]
        return lambda tokens, grid: _on_grid(order.gather(tokens), grid)
    # a pooling block's norm1 reads the stage before's tokens, in that stage's unrolled order
    cfg, s = model.config, model.block_stages[layer.block]
    before = permuted(unrolled_order(g_in, cfg.q_stride, cfg.num_stages - s).to(x.device))
    return lambda tokens, grid: _on_grid(before.gather(tokens), tuple(g_in))
