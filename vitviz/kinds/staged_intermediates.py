"""The intermediates accessor (``Intermediates``, DESIGN §3) for the kinds whose stages each have
their own token grid (Swin, the pyramid ViTs), written once over a ``StagedSites`` each kind
gives: its blocks, their output projections, and how a projection's input and a block's output
are laid out against the block's grid.

One forward pass of the network's own ``forward`` with hooks: a forward pre-hook on every block
(its inputs, for the layout), a forward pre-hook on every attention's output projection (its
input is the heads' outputs concatenated, (B, *, heads·d) in the module's token order: read,
mapped to the grid row-major, and, where ``replace`` asks, overwritten before the projection
reads it), and a forward hook on every block (its output tokens, put on the grid as (B, C, h, w)).
Both hand the network back the tensors they report, mapped back to its order (the same values),
so that gradients reach them. The hooks are removed when the pass ends, whatever happens.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from vitviz.kindapi.grids import LayerGrid
from vitviz.kindapi.intermediates import (
    BlockOutputs,
    HeadReplacement,
    Intermediates,
    OnRows,
    attention_branch,
    mlp_branch,
)


@dataclass(frozen=True)
class TokenOrder:
    """How an attention layer's projection input (B, *, C), in the module's own token order,
    sits on the layer's grid: ``gather`` (B, *, C) -> (B, N, C) row-major over the grid;
    ``scatter(x, g)`` the module's input ``x`` with its grid tokens replaced by ``g`` (B, N, C)
    (slots of no grid token, a Swin window's padding, kept as they are)."""

    gather: Callable[[Tensor], Tensor]
    scatter: Callable[[Tensor, Tensor], Tensor]


ROW_MAJOR = TokenOrder(gather=lambda x: x, scatter=lambda x, g: g)  # (B, N, C) as it is


def permuted(order: Tensor) -> TokenOrder:
    """Position i of the module's tokens holds row-major grid token ``order[i]`` (N,) long."""
    inverse = torch.argsort(order)
    return TokenOrder(gather=lambda x: x[:, inverse], scatter=lambda x, g: g[:, order])


class StagedSites(Protocol):
    """One network's attention layers for one input, as a kind lays them out (one attention
    layer per block, in the order of the kind's ``layer_rows``)."""

    blocks: Sequence[nn.Module]  # every block, stage by stage
    projections: Sequence[nn.Module]  # each block's attention output projection
    head_counts: Sequence[int]  # each block's heads

    def head_order(self, block: int, args: tuple[Any, ...]) -> TokenOrder:
        """The token order of ``block``'s projection input; ``args`` the block's inputs."""
        ...

    def block_tokens(self, block: int, args: tuple[Any, ...], output: Any) -> Tensor:
        """``block``'s output tokens on its grid, (B, C, h, w)."""
        ...

    def block_output(self, block: int, tokens: Tensor, output: Any) -> Any:
        """``block``'s ``output`` with its tokens taken from ``tokens`` (B, C, h, w) (the same
        values: later blocks then read the tensor the accessor hands back)."""
        ...

    def grid(self, block: int) -> LayerGrid:
        """``block``'s grid (asked after the pass)."""
        ...

    def logits(self, x: Tensor) -> Tensor:
        """The network's own forward: (B, classes), (B, 0) without a head."""
        ...


class PrefixedSites:
    """``StagedSites`` of a network whose blocks give [``prefix`` tokens, their grid row-major]
    (B, P + N, C) as item ``TOKENS_AT`` of their output (MViTv2, PiT, TNT, CrossViT's ViT
    blocks): heads in that order, each block's prefix kept in ``prefixes`` (B, P, C) as the
    pass reaches it. A subclass gives ``grid(block)``."""

    TOKENS_AT = 0  # the item of a block's output that holds its tokens

    def __init__(
        self,
        model: nn.Module,
        blocks: Sequence[nn.Module],
        projections: Sequence[nn.Module],
        head_counts: Sequence[int],
        prefix: int,
    ) -> None:
        self.model = model
        self.blocks = blocks
        self.projections = projections
        self.head_counts = head_counts
        self.prefix = prefix
        self.prefixes: list[Tensor | None] = [None] * len(blocks)

    def head_order(self, block: int, args: tuple[Any, ...]) -> TokenOrder:
        return ROW_MAJOR  # [prefix, grid row-major], as the accessor lays heads out

    def block_tokens(self, block: int, args: tuple[Any, ...], output: Any) -> Tensor:
        tokens = output[self.TOKENS_AT]  # (B, P + N, C)
        self.prefixes[block] = tokens[:, : self.prefix]
        B, _, C = tokens.shape
        return tokens[:, self.prefix :].transpose(1, 2).reshape(B, C, *self.grid(block).grid)

    def block_output(self, block: int, tokens: Tensor, output: Any) -> Any:
        prefix = self.prefixes[block]
        assert prefix is not None  # kept by block_tokens just before
        merged = torch.cat([prefix, tokens.flatten(2).transpose(1, 2)], dim=1)
        at = self.TOKENS_AT
        return (*output[:at], merged, *output[at + 1 :])

    def grid(self, block: int) -> LayerGrid:
        raise NotImplementedError

    def logits(self, x: Tensor) -> Tensor:
        return head_logits(self.model(x), int(self.model.config.num_classes))


Plan = dict[int, dict[int, Tensor | OnRows | None]]


def check_replace(replace: HeadReplacement | None, head_counts: Sequence[int]) -> Plan:
    """{layer: {head: None or tensor}} of ``replace``; ValueError for a key that is not a
    (layer, head) pair of the network or a value that is neither None nor a tensor."""
    plan: Plan = {}
    layers = len(head_counts)
    for key, value in (replace or {}).items():
        if not (
            isinstance(key, tuple)
            and len(key) == 2
            and all(isinstance(k, int) and not isinstance(k, bool) for k in key)
        ):
            raise ValueError(f"a head replacement's key is (layer, head), got {key!r}")
        layer, head = key
        if not 0 <= layer < layers:
            raise ValueError(
                f"layer {layer} is out of range: the model has {layers} attention layers "
                f"(0 to {layers - 1})"
            )
        if not 0 <= head < head_counts[layer]:
            raise ValueError(
                f"head {head} is out of range: layer {layer} has {head_counts[layer]} heads "
                f"(0 to {head_counts[layer] - 1})"
            )
        if value is not None and not isinstance(value, (Tensor, OnRows)):
            raise ValueError(
                f"the replacement of layer {layer} head {head} must be None (zero it) or a "
                f"tensor (of every row, or OnRows), got {type(value).__name__}"
            )
        plan.setdefault(layer, {})[head] = value
    return plan


def replaced_heads(
    per_head: Tensor, layer: int, wanted: Mapping[int, Tensor | OnRows | None]
) -> Tensor:
    """(B, heads, N, d) with the heads ``wanted`` replaced (None: zeroed; ``OnRows``: in its
    rows only); ValueError for a replacement whose shape is not that head's (B, N, d)."""
    B, _, N, d = per_head.shape
    out = per_head.clone()
    for head, value in wanted.items():
        if isinstance(value, OnRows):
            value.put(out, head, f"the replacement of layer {layer} head {head}")
            continue
        if value is None:
            out[:, head] = 0
            continue
        if tuple(value.shape) != (B, N, d):
            raise ValueError(
                f"the replacement of layer {layer} head {head} is {tuple(value.shape)}; that "
                f"head's output is (B, N, head_dim) = {(B, N, d)}"
            )
        out[:, head] = value.to(device=out.device, dtype=out.dtype)
    return out


def heads_hook(
    layer: int,
    count: int,
    wanted: Mapping[int, Tensor | OnRows | None] | None,
    into: list[Tensor | None] | None,
    order: Callable[[], TokenOrder] = lambda: ROW_MAJOR,
) -> Callable[..., tuple[Any, ...]]:
    """A forward pre-hook for attention layer ``layer``'s output projection, whose input
    (B, *, count·d) is its ``count`` heads' outputs side by side: split on the layer's grid
    (``order``, asked at each call) into (B, count, N, d), the heads ``wanted`` replaced
    (replaced_heads), kept in ``into[layer]`` (None: nothing kept) and handed back to the
    projection in its own token order (the same values where nothing is replaced), so that
    gradients reach the kept tensor."""

    def hook(_module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
        token_order = order()
        grid = token_order.gather(args[0])  # (B, N, C)
        B, N, C = grid.shape
        per_head = grid.reshape(B, N, count, C // count).transpose(1, 2)
        if wanted is not None:
            per_head = replaced_heads(per_head, layer, wanted)
        if into is not None:
            into[layer] = per_head
        merged = per_head.transpose(1, 2).reshape(B, N, C)
        return (token_order.scatter(args[0], merged), *args[1:])

    return hook


def staged_intermediates(
    sites: StagedSites, x: Tensor, replace: HeadReplacement | None, logits_only: bool = False
) -> Intermediates:
    """One forward pass of ``x`` (B, C, H, W) with every block's output and every head's output
    before the projection captured, ``replace`` applied before the projection. Gradients flow
    where the caller has them enabled (the tensors are not detached). ``logits_only``: nothing
    read or kept but the logits (hooks on the replaced layers only)."""
    counts = [int(c) for c in sites.head_counts]
    plan = check_replace(replace, counts)
    L = len(counts)
    inputs: list[tuple[Any, ...]] = [()] * L
    blocks: list[Tensor | None] = [None] * L
    heads: list[Tensor | None] = [None] * L

    def enter(b: int) -> Callable[..., None]:
        def hook(_module: nn.Module, args: tuple[Any, ...]) -> None:
            inputs[b] = args

        return hook

    def leave(b: int) -> Callable[..., Any]:
        def hook(_module: nn.Module, _args: tuple[Any, ...], output: Any) -> Any:
            tokens = blocks[b] = sites.block_tokens(b, inputs[b], output)
            return sites.block_output(b, tokens, output)

        return hook

    handles = []
    try:
        for b, (block, proj) in enumerate(zip(sites.blocks, sites.projections, strict=True)):
            if b in plan or not logits_only:
                handles.append(block.register_forward_pre_hook(enter(b)))
                hook = heads_hook(
                    b,
                    counts[b],
                    plan.get(b),
                    None if logits_only else heads,
                    lambda b=b: sites.head_order(b, inputs[b]),
                )
                handles.append(proj.register_forward_pre_hook(hook))
            if not logits_only:
                handles.append(block.register_forward_hook(leave(b)))
        logits = sites.logits(x)
    finally:
        for handle in handles:
            handle.remove()
    modules = dict(
        replaced=tuple(sorted((layer, h) for layer, hs in plan.items() for h in hs)),
        projections=tuple(sites.projections),
        block_modules=tuple(sites.blocks),
        mlps=tuple(mlp_branch(b) for b in sites.blocks),
        attention_branches=tuple(
            attention_branch(b, (p,)) for b, p in zip(sites.blocks, sites.projections, strict=True)
        ),
    )
    if logits_only:
        return Intermediates(logits, (), (), (), (), (), **modules)
    kept = [t for t in blocks if t is not None]
    per_head = [t for t in heads if t is not None]
    if len(kept) != L or len(per_head) != L:
        raise ValueError("the forward pass did not run every block's attention")
    grids = tuple(sites.grid(b) for b in range(L))
    return Intermediates(
        logits=logits,
        blocks=tuple(kept),
        block_prefix=tuple(t.new_zeros(t.shape[0], 0, t.shape[1]) for t in kept),
        block_grids=grids,
        heads=tuple(per_head),
        head_grids=grids,
        **modules,
    )


def model_input(model: nn.Module, x: Tensor) -> Tensor:
    """``x`` (B, C, H, W) on the model's device and in its dtype; ValueError for another rank."""
    if not isinstance(x, Tensor) or x.ndim != 4:
        shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"the intermediates accessor takes a batch (B, C, H, W), got {shape}")
    param = next(model.parameters())
    return x.to(device=param.device, dtype=param.dtype)


def head_logits(logits: Tensor, classes: int) -> Tensor:
    """The forward's output as logits: (B, 0) for a network without a head (whose forward
    gives the pooled features)."""
    return logits if classes else logits.new_zeros(logits.shape[0], 0)


Calls = list[tuple[tuple[Any, ...], Any] | None]  # per block: (its inputs, its output)


@contextmanager
def block_calls(blocks: Sequence[nn.Module]) -> Iterator[Calls]:
    """Each of ``blocks``' inputs and output during the ``with`` (an analysis's own pass), for
    ``kept_block_outputs``; the hooks change nothing and are removed when it ends."""
    calls: Calls = [None] * len(blocks)

    def leave(b: int) -> Callable[..., None]:
        def hook(_module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
            calls[b] = (args, output)

        return hook

    handles = [block.register_forward_hook(leave(b)) for b, block in enumerate(blocks)]
    try:
        yield calls
    finally:
        for handle in handles:
            handle.remove()


def kept_block_outputs(sites: StagedSites, calls: Calls, logits: Tensor) -> BlockOutputs | None:
    """The block outputs of another pass of the same input (``block_calls``), laid out as
    ``staged_intermediates`` lays them out: ``blocks`` (B, C, h, w) detached, no prefix,
    ``block_grids``; None where a block did not run."""
    if len(calls) != len(sites.blocks) or any(c is None for c in calls):
        return None
    blocks = []
    for b, call in enumerate(calls):
        assert call is not None
        args, output = call
        sites.head_order(b, args)  # as the accessor's pass asks it (a Swin's window layout)
        blocks.append(sites.block_tokens(b, args, output).detach())
    return BlockOutputs(
        logits=logits,
        blocks=tuple(blocks),
        block_prefix=tuple(t.new_zeros(t.shape[0], 0, t.shape[1]) for t in blocks),
        block_grids=tuple(sites.grid(b) for b in range(len(blocks))),
    )


def layer_intermediates(
    model: nn.Module,
    sites: StagedSites,
    layers: Sequence[nn.Module],
    head_grids: Sequence[LayerGrid],
    x: Tensor,
    replace: HeadReplacement | None,
    logits_only: bool,
    prefixes: Sequence[Tensor | None] | None = None,
) -> Intermediates:
    """``Intermediates`` of a network whose attention layers are not one per block (CrossViT's
    cross-attention, VOLO's class blocks) on ``x`` (B, C, H, W): ``layers`` in the head grid's
    order, each with an ``attn`` whose ``proj`` input (B, N, heads·d) is its heads side by
    side, row-major on ``head_grids``; ``sites.blocks`` those on a grid, their outputs
    (B, C, h, w) kept.
    ``prefixes``: each kept block's prefix tokens (B, P, C), filled by ``sites`` during the
    pass (None: no prefix). One pass of the network's own forward (``sites.logits``), the
    hooks removed when it ends."""
    projections = [m.attn.proj for m in layers]
    counts = [int(m.attn.heads) for m in layers]
    plan = check_replace(replace, counts)
    heads: list[Tensor | None] = [None] * len(layers)
    blocks: list[Tensor | None] = [None] * len(sites.blocks)

    def leave(j: int) -> Callable[..., Any]:
        def hook(_module: nn.Module, args: tuple[Any, ...], output: Any) -> Any:
            grid = blocks[j] = sites.block_tokens(j, args, output)
            return sites.block_output(j, grid, output)

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
        logits = sites.logits(model_input(model, x))
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
    if prefixes is None:
        block_prefix = tuple(t.new_zeros(t.shape[0], 0, t.shape[1]) for t in kept)
    else:
        block_prefix = tuple(p for p in prefixes if p is not None)
    return Intermediates(
        logits=logits,
        blocks=tuple(kept),
        block_prefix=block_prefix,
        block_grids=tuple(sites.grid(j) for j in range(len(kept))),
        heads=tuple(per_head),
        head_grids=tuple(head_grids),
        **modules,
    )


def prefixed_intermediates(
    model: nn.Module,
    sites: PrefixedSites,
    x: Tensor,
    replace: HeadReplacement | None,
    logits_only: bool,
) -> Intermediates:
    """``staged_intermediates`` of ``model``'s ``sites`` on ``x`` (B, C, H, W) with each
    block's prefix tokens (B, P, C) as ``block_prefix`` (a model without any: none)."""
    out = staged_intermediates(sites, model_input(model, x), replace, logits_only)
    if logits_only or not sites.prefix:
        return out
    prefixes = tuple(p for p in sites.prefixes if p is not None)
    return dataclasses.replace(out, block_prefix=prefixes)


def require_own_network(model: nn.Module, network: type, noun: str) -> None:
    """ValueError in one line unless ``model`` is vitviz's own ``network`` (``noun``: how the
    message names it), the one network the kind's accessor takes apart."""
    if not isinstance(model, network):
        raise ValueError(
            f"the intermediates accessor needs vitviz's {noun}, got {type(model).__name__}"
        )
