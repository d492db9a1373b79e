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
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from vitviz.kindapi.grids import LayerGrid
from vitviz.kindapi.intermediates import (
    HeadReplacement,
    Intermediates,
    attention_branch,
    mlp_branch,
)
from vitviz.kinds.crossvit.network import CrossViTNet
from vitviz.kinds.staged_intermediates import (
    ROW_MAJOR,
    TokenOrder,
    check_replace,
    head_logits,
    heads_hook,
    model_input,
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


class CrossViTSites:
    """A CrossViT's ViT blocks as the staged kinds' kept-outputs code reads them
    (``StagedSites``'s block side)."""

    def __init__(self, model: CrossViTNet) -> None:
        cfg = model.config
        self.model = model
        pairs = model.self_blocks()
        self.blocks = [block for _b, block in pairs]
        self.branches = [b for b, _block in pairs]
        self.projections = [block.attn.proj for block in self.blocks]
        self.head_counts = [block.attn.heads for block in self.blocks]
        self.grids = [
            LayerGrid(grid=cfg.grid(b), token_pixels=cfg.token_pixels(b), num_prefix_tokens=1)  # type: ignore[arg-type]
            for b in range(2)
        ]
        self.prefixes: list[Tensor | None] = [None] * len(self.blocks)

    def head_order(self, block: int, args: tuple[Any, ...]) -> TokenOrder:
        return ROW_MAJOR

    def block_tokens(self, block: int, args: tuple[Any, ...], output: Any) -> Tensor:
        tokens = output[0]  # (B, 1 + N, C)
        self.prefixes[block] = tokens[:, :1]
        B, _, C = tokens.shape
        return tokens[:, 1:].transpose(1, 2).reshape(B, C, *self.grid(block).grid)

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
    if not isinstance(model, CrossViTNet):
        raise ValueError(
            f"the intermediates accessor needs vitviz's CrossViT, got {type(model).__name__}"
        )
    layers = layer_modules(model)
    projections = [m.attn.proj for m in layers]
    counts = [int(m.attn.heads) for m in layers]
    plan = check_replace(replace, counts)
    sites = CrossViTSites(model)
    heads: list[Tensor | None] = [None] * len(layers)
    blocks: list[Tensor | None] = [None] * len(sites.blocks)

    def leave(j: int) -> Callable[..., Any]:
        def hook(_module: nn.Module, args: tuple[Any, ...], output: Any) -> Any:
            grid = blocks[j] = sites.block_tokens(j, args, output)
            prefix = sites.prefixes[j]
            assert prefix is not None
            return (torch.cat([prefix, grid.flatten(2).transpose(1, 2)], dim=1), *output[1:])

        return hook

    handles = []
    try:
        for i, proj in enumerate(projections):
            if i in plan or not logits_only:
                hook = heads_hook(i, counts[i], plan.get(i), None if logits_only else heads)
                handles.append(proj.register_forward_pre_hook(hook))
        if not logits_only:
            for j, block in enumerate(sites.blocks):
                handles.append(block.register_forward_hook(leave(j)))
        logits = head_logits(model(model_input(model, x)), int(model.config.num_classes))
    finally:
        for handle in handles:
            handle.remove()
    modules = dict(
        replaced=tuple(sorted((i, h) for i, hs in plan.items() for h in hs)),
        projections=tuple(projections),
        block_modules=tuple(sites.blocks),
        mlps=tuple(mlp_branch(b) for b in sites.blocks),
        attention_branches=tuple(
            attention_branch(m, (p,)) for m, p in zip(layers, projections, strict=True)
        ),
    )
    if logits_only:
        return Intermediates(logits, (), (), (), (), (), **modules)
    kept = [t for t in blocks if t is not None]
    per_head = [t for t in heads if t is not None]
    if len(kept) != len(blocks) or len(per_head) != len(heads):
        raise ValueError("the forward pass did not run every attention layer")
    prefixes = tuple(p for p in sites.prefixes if p is not None)
    return Intermediates(
        logits=logits,
        blocks=tuple(kept),
        block_prefix=prefixes,
        block_grids=tuple(sites.grid(j) for j in range(len(kept))),
        heads=tuple(per_head),
        head_grids=tuple(head_grids(model)),
        **modules,
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
