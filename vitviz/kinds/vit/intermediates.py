"""The intermediates accessor of the token-layout kinds (ViT, CaiT, XCiT, CLIP/SigLIP): one
forward pass of the network's own ``forward`` with hooks that read every block's output and
every attention layer's heads at its output projection, and replace heads there (DESIGN §3).

A kind describes its network as ``BlockSite``s and ``HeadSite``s (``vit_sites`` for vitviz's
``VisionTransformer``; the CaiT and XCiT kinds name their own) and ``read_intermediates`` runs
the pass. A head's output is what the output projection reads: the input of the ``Linear``
after the attention, (B, N, heads · head_dim), split into heads, so concatenating the heads and
projecting is the attention branch's output and replacing a head there reaches the logits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from vitviz.kindapi.grids import LayerGrid
from vitviz.kindapi.intermediates import (
    HeadReplacement,
    Intermediates,
    OnRows,
    attention_branch,
    mlp_branch,
)


@dataclass(frozen=True)
class BlockSite:
    """A block whose output (a tensor, or a tuple whose first item is one) holds tokens
    (B, N, C): ``skip`` leading tokens it carries without taking part (CaiT's CLS in its
    self-attention blocks), then ``prefix`` prefix tokens, then the patch grid row-major."""

    block: nn.Module
    prefix: int
    skip: int = 0


@dataclass(frozen=True)
class HeadSite:
    """An attention layer read at ``projection``, the Linear whose input is its ``heads``
    outputs concatenated (B, N, heads · head_dim): ``prefix`` query tokens first, then the
    patch grid (``patches``) or nothing (a class-attention layer: the CLS alone)."""

    projection: nn.Linear
    heads: int
    prefix: int
    patches: bool = True
    # a block of several branches: the other branches' projections; the layer's ``heads`` are
    # split evenly among ``projections``, branch after branch
    branches: tuple[nn.Linear, ...] = ()
    block: nn.Module | None = None  # the block that adds the layer's attention branch

    @property
    def attention_branch(self) -> tuple[nn.Module, ...]:
        """The modules whose outputs are the layer's attention branch (``attention_branch``)."""
        return attention_branch(self.block, self.projections)

    @property
    def projections(self) -> tuple[nn.Linear, ...]:
        return (self.projection, *self.branches)

    @property
    def branch_heads(self) -> int:
        """The heads each projection reads."""
        return self.heads // len(self.projections)

    @property
    def head_dim(self) -> int:
        return self.projection.in_features // self.branch_heads

    def layer_grid(self, grid: tuple[int, int], token_pixels: int) -> LayerGrid:
        return LayerGrid(grid if self.patches else (0, 0), token_pixels, self.prefix)


def _is_index(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_replacement(replace: HeadReplacement | None, sites: Sequence[HeadSite]) -> None:
    """ValueError for a layer or head out of range, or a value neither None nor a tensor."""
    for key, value in (replace or {}).items():
        if not (isinstance(key, tuple) and len(key) == 2 and all(_is_index(i) for i in key)):
            raise ValueError(f"a head replacement's key is (layer, head), two ints: got {key!r}")
        layer, head = key
        if not 0 <= layer < len(sites):
            raise ValueError(
                f"head replacement ({layer}, {head}): layer {layer} is out of range "
                f"(the model has attention layers 0–{len(sites) - 1})"
            )
        if not 0 <= head < sites[layer].heads:
            raise ValueError(
                f"head replacement ({layer}, {head}): head {head} is out of range "
                f"(layer {layer} has heads 0–{sites[layer].heads - 1})"
            )
        if value is not None and not isinstance(value, (Tensor, OnRows)):
            raise ValueError(
                f"head replacement ({layer}, {head}): None (zero it) or a tensor "
                f"(B, N, head_dim) (or OnRows: some rows), got {type(value).__name__}"
            )


def _replaced(
    heads: Tensor, todo: dict[int, Tensor | OnRows | None], layer: int, first: int = 0
) -> Tensor:
    """(B, H, N, hd) heads with ``todo`` {head: None (zeros), (B, N, hd) or ``OnRows``} put in;
    the layer's heads from ``first`` on (a branch's)."""
    B, H, N, hd = heads.shape
    out = heads.clone()
    for head, value in todo.items():
        if not first <= head < first + H:
            continue
        if isinstance(value, OnRows):
            value.put(out, head - first, f"head replacement ({layer}, {head})")
            continue
        if value is None:
            out[:, head - first] = 0.0
            continue
        if tuple(value.shape) != (B, N, hd):
            raise ValueError(
                f"head replacement ({layer}, {head}): a tensor (B, N, head_dim) = "
                f"{(B, N, hd)} is needed, got {tuple(value.shape)}"
            )
        out[:, head - first] = value.to(out)
    return out


def _joined_branches(read: dict[int, Tensor]) -> Tensor:
    """{branch: (B, H', N, hd)} -> the layer's heads (B, H, N, hd), branch after branch."""
    parts = [read[b] for b in sorted(read)]
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)


def read_intermediates(
    forward: Callable[[Tensor], Tensor],
    x: Tensor,
    *,
    blocks: Sequence[BlockSite],
    heads: Sequence[HeadSite],
    grid_from: nn.Module,
    token_pixels: int,
    num_classes: int,
    replace: HeadReplacement | None = None,
    logits_only: bool = False,
) -> Intermediates:
    """``forward(x)`` (the network's own, logits (B, classes)) with every block's output and
    every head read, ``replace`` applied at the projections. ``grid_from``: the patch
    embedding, whose output is (tokens, (gh, gw)); ``num_classes`` 0: the logits are (B, 0);
    ``logits_only``: nothing read or kept but the logits (hooks on the replaced layers only)."""
    check_replacement(replace, heads)
    todo: dict[int, dict[int, Tensor | OnRows | None]] = {}
    for (layer, head), value in (replace or {}).items():
        todo.setdefault(layer, {})[head] = value
    grid: list[tuple[int, int]] = []
    outputs: dict[int, Tensor] = {}
    read: dict[int, dict[int, Tensor]] = {}  # {layer: {branch: (B, H', N, hd)}}

    def keep_grid(module: nn.Module, args: tuple, output: tuple) -> None:
        grid.append((int(output[1][0]), int(output[1][1])))

    def keep_block(i: int) -> Callable:
        def hook(module: nn.Module, args: tuple, output: Tensor | tuple) -> None:
            outputs[i] = output[0] if isinstance(output, tuple) else output

        return hook

    def at_projection(i: int, site: HeadSite, branch: int) -> Callable:
        def hook(module: nn.Module, args: tuple) -> tuple | None:
            concat = args[0]  # (B, N, heads · head_dim)
            B, N, _ = concat.shape
            split = concat.unflatten(-1, (site.branch_heads, site.head_dim)).transpose(1, 2)
            if i not in todo:
                read.setdefault(i, {})[branch] = split
                return None
            split = _replaced(split, todo[i], i, branch * site.branch_heads)
            if not logits_only:
                read.setdefault(i, {})[branch] = split
            return (split.transpose(1, 2).reshape(B, N, -1), *args[1:])

        return hook

    handles = []
    if not logits_only:
        handles.append(grid_from.register_forward_hook(keep_grid))
        handles += [s.block.register_forward_hook(keep_block(i)) for i, s in enumerate(blocks)]
    handles += [
        proj.register_forward_pre_hook(at_projection(i, s, b))
        for i, s in enumerate(heads)
        for b, proj in enumerate(s.projections)
        if i in todo or not logits_only
    ]
    try:
        logits = forward(x)
    finally:
        for handle in handles:
            handle.remove()
    modules = dict(
        replaced=tuple(sorted((replace or {}).keys())),
        projections=tuple(s.projection for s in heads),
        block_modules=tuple(s.block for s in blocks),
        mlps=tuple(mlp_branch(s.block) for s in blocks),
        attention_branches=tuple(s.attention_branch for s in heads),
        head_projections=tuple(s.projections for s in heads),
    )
    logits = logits if num_classes else logits[:, :0]
    if logits_only:
        return Intermediates(logits, (), (), (), (), (), **modules)
    gh, gw = grid[-1]
    on_grid, prefix = [], []
    for i, site in enumerate(blocks):
        tokens = outputs[i][:, site.skip :]  # (B, P + gh·gw, C)
        prefix.append(tokens[:, : site.prefix])
        patches = tokens[:, site.prefix :]
        on_grid.append(patches.transpose(1, 2).unflatten(-1, (gh, gw)))
    return Intermediates(
        logits=logits,
        blocks=tuple(on_grid),
        block_prefix=tuple(prefix),
        block_grids=tuple(LayerGrid((gh, gw), token_pixels, s.prefix) for s in blocks),
        heads=tuple(_joined_branches(read[i]) for i in range(len(heads))),
        head_grids=tuple(s.layer_grid((gh, gw), token_pixels) for s in heads),
        **modules,
    )


# -- vitviz's VisionTransformer (a ViT, a CLIP or SigLIP image tower) -------------------------
def read_patch_model(
    model: nn.Module,
    x: Tensor,
    blocks: Sequence[BlockSite],
    heads: Sequence[HeadSite],
    replace: HeadReplacement | None = None,
    logits_only: bool = False,
) -> Intermediates:
    """``read_intermediates`` of one of vitviz's token-layout networks: its forward pass, its
    ``patch_embed`` giving the grid, its config the patch size and the classes."""
    return read_intermediates(
        model,
        x,
        blocks=blocks,
        heads=heads,
        grid_from=model.patch_embed,
        token_pixels=int(model.config.patch_size),
        num_classes=int(model.config.num_classes),
        replace=replace,
        logits_only=logits_only,
    )


def _vit_head_site(block: nn.Module, prefix: int) -> HeadSite:
    from vitviz.blocks.branches import BranchedBlock
    from vitviz.blocks.parallel import ParallelBlock

    if isinstance(block, ParallelBlock):  # attention beside the MLP: its own out projection
        return HeadSite(block.attn_out_proj, block.heads, prefix, block=block)
    if isinstance(block, BranchedBlock):  # each branch's heads at its own projection
        first, *more = [b.attn.proj for b in block.attns]
        return HeadSite(first, block.heads, prefix, branches=tuple(more), block=block)
    return HeadSite(block.attn.proj, block.attn.heads, prefix, block=block)


def vit_intermediates(
    model: nn.Module,
    x: Tensor,
    *,
    replace: HeadReplacement | None = None,
    logits_only: bool = False,
) -> Intermediates:
    """A ``VisionTransformer``'s intermediates: every block attends over [prefix, patches].
    ValueError for a model from the user's code (its heads are not vitviz's to read)."""
    from vitviz.blocks import VisionTransformer

    if not isinstance(model, VisionTransformer):
        raise ValueError(
            f"the intermediates of a {type(model).__name__} can't be read: for a model from "
            "your own code vitviz captures the attention matrices, not each head's output "
            "before the output projection, so it can't read or replace heads"
        )
    prefix = int(model.num_prefix_tokens)
    blocks = [BlockSite(b, prefix) for b in model.blocks]
    heads = [_vit_head_site(b, prefix) for b in model.blocks]
    return read_patch_model(model, x, blocks, heads, replace, logits_only)
