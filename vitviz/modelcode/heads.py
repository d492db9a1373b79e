"""Attention computed one head at a time, grouped into layers by the model's own structure.

Tutorial ViTs often compute each head on its own: a ``Head`` module per head (its own query,
key and value Linears, a (B, N, N) softmax) held in the attention module's ``nn.ModuleList``,
or a ``for h in range(heads)`` loop over slices inside one attention module. The capture then
sees L·H one-head softmaxes. The module tree says which belong together:

- the layer is the call of the repeated unit that holds them (a block: an element of the
  ModuleList / Sequential whose children are the transformer blocks), or else of the module
  that computes them;
- inside it, heads held in a ModuleList / Sequential are ordered by their index in it (they
  must read one input and be computed in that order: the order the output projection is
  taken to read them in), heads computed in one module's loop by the order they are computed;
- the heads of one layer must not read each other's results (``check_side_by_side``).

``plan_heads`` turns the module calls active at each attention of the probing pass
(``vitviz.modelcode.calls``) into a ``HeadPlan`` (record -> layer, head), or refuses in one line
where the structure does not say (heads spread over unrelated modules). ``one_per_layer`` makes
each (N, N) softmax of one image that no module groups its own layer.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from vitviz.modelcode.assembly import ONE_MATRIX, HeadPlan
from vitviz.modelcode.calls import Call
from vitviz.modelcode.capture import CaptureLog
from vitviz.modelcode.errors import ModelCodeError


def _parent(name: str) -> tuple[str, int] | None:
    """'blocks.1' -> ('blocks', 1); None when the name does not end in an index."""
    head, _, last = name.rpartition(".")
    return (head, int(last)) if last.isdigit() else None


@dataclass
class _Group:
    """The one-head softmaxes of one layer: (record, order key) each."""

    key: tuple
    where: str  # the module that holds them, for notes and messages
    members: list[tuple[int, int]] = field(default_factory=list)
    inputs: list[Tensor | None] = field(default_factory=list)
    by_list: bool = False


def _group_of(
    calls: tuple[Call, ...], blocks: set[str], lists: set[str], order: int, held: Counter[int]
) -> tuple[tuple, str, int, Tensor | None, bool] | None:
    """(group key, where, head order, head input, by list) of one softmax made during
    ``calls`` (outermost first; ``held``: how many one-head softmaxes each call made); None
    when no module but the model itself holds it.

    The block is the outermost call that is a child of a block container. Below it, the
    outermost call that is an element of another ModuleList / Sequential and made this softmax
    alone is a head (ordered by its index, grouped by the list and the call holding it); else
    the outermost call below the block (the attention module), or the block, holds the layer's
    heads in the order computed. Without a block the innermost call does.
    """
    block = next((i for i, c in enumerate(calls) if _listed_in(c, blocks)), None)
    below = calls[block + 1 :] if block is not None else calls
    for i, c in enumerate(below):
        parent = _parent(c.name)
        alone = held[c.number] == 1
        if alone and parent is not None and parent[0] in lists and parent[0] not in blocks:
            holder = below[i - 1] if i else (calls[block] if block is not None else None)
            key = (holder.number if holder is not None else -1, parent[0])
            return key, parent[0], parent[1], c.input, True
    if block is not None:
        owner = below[0] if below else calls[block]
    elif below:
        owner = below[-1]
    else:
        return None
    return (owner.number,), owner.name, order, None, False


def _listed_in(call: Call, containers: set[str]) -> bool:
    parent = _parent(call.name)
    return parent is not None and parent[0] in containers


def plan_heads(
    log: CaptureLog, model: nn.Module, blocks: list[nn.Module], tokens: int, name: str
) -> tuple[HeadPlan, str] | None:
    """The plan grouping the one-head softmaxes over ``tokens`` tokens of the probing pass
    (``log`` with ``places``) into layers, and a note; None when there are none to group (or
    each group holds one head: a one-head model). ``blocks`` are the containers whose children
    are the transformer blocks. ModelCodeError where the structure does not say."""
    names = {id(m): n for n, m in model.named_modules()}
    block_names = {names[id(b)] for b in blocks if id(b) in names}
    lists = {n for n, m in model.named_modules() if isinstance(m, (nn.ModuleList, nn.Sequential))}
    one_head = [i for i, a in enumerate(_raw(log)) if a.shape[1] == 1 and a.shape[-1] == tokens]
    if len(one_head) < 2:
        return None
    held = Counter(c.number for index in one_head for c in log.places[index])
    groups: dict[tuple, _Group] = {}
    for order, index in enumerate(one_head):
        found = _group_of(log.places[index], block_names, lists, order, held)
        if found is None:
            raise ModelCodeError(
                f"{name} computes attention one head at a time in its own forward, outside any "
                "module: vitviz can't tell which heads form a layer; compute them in an "
                "attention module (or as one softmax over (B, heads, N, N) scores) to open it"
            )
        key, where, rank, first, by_list = found
        group = groups.setdefault(key, _Group(key, where, by_list=by_list))
        group.members.append((index, rank))
        group.inputs.append(first)
    counts = {len(g.members) for g in groups.values()}
    if counts == {1}:
        return None
    if len(counts) > 1:
        places = ", ".join(f"{len(g.members)} in {g.where}" for g in groups.values())
        raise ModelCodeError(
            f"{name} computes attention one head at a time, and the heads don't group into "
            f"layers of one head count by the modules that hold them ({places})"
        )
    for g in groups.values():
        _check_one_input(g, name)
    spots: dict[int, tuple[int, int, int]] = {}
    for layer, g in enumerate(sorted(groups.values(), key=lambda g: min(g.members)[0])):
        ranked = sorted(g.members, key=lambda m: m[1])
        if len({r for _, r in ranked}) != len(ranked):
            raise ModelCodeError(
                f"{name} computes attention one head at a time, and two of the softmaxes of "
                f"{g.where} come from one of its heads: vitviz can't tell which head is which"
            )
        computed = [r for _, r in sorted(g.members)]
        if g.by_list and computed != sorted(computed):
            raise ModelCodeError(
                f"{name} computes the heads of {g.where} in another order than listed "
                f"({', '.join(map(str, computed))}): vitviz can't tell which part of the output "
                "projection each one feeds; compute them in their list order"
            )
        for head, (index, _) in enumerate(ranked):
            spots[index] = (layer, head, len(ranked))
    H = counts.pop()
    first = next(iter(groups.values()))
    how = "heads in the order computed"
    if first.by_list:
        how = f"heads ordered as listed in {first.where}"
    note = (
        f"attention computed one head at a time: {len(one_head)} one-head softmaxes grouped "
        f"into {len(groups)} layers × {H} heads by the module holding them ({how})"
    )
    lists = tuple(dict.fromkeys(g.where for g in groups.values() if g.by_list))
    return HeadPlan(spots, lists), note


def check_side_by_side(log: CaptureLog, plan: HeadPlan, name: str) -> None:
    """ModelCodeError when a head of a planned layer depends on another head of that layer.

    ``log``: the probing pass run again with gradients (same image, same records). The heads
    of one layer are computed side by side from one input; softmaxes computed one after the
    other (two attentions in one module's loops, or in one block's forward) grouped into one
    layer would be shown as heads of one attention, a false picture. For each layer L the
    gradient of Σ_j <w_j, A_j> over its pieces A_j (random w_j) is w_i at each A_i exactly when
    no piece depends on another; anything more is a dependency.
    """
    by_layer: dict[int, list[int]] = {}
    for record, (layer, _, _) in plan.spots.items():
        by_layer.setdefault(layer, []).append(record)
    g = torch.Generator().manual_seed(2)
    for layer, records in sorted(by_layer.items()):
        if max(records) >= len(log.attentions):
            raise ModelCodeError(f"{name}: its forward pass made fewer softmaxes when run again")
        pieces = [log.attentions[r] for r in sorted(records)]
        if not all(p.requires_grad for p in pieces):
            continue  # no gradient path here: nothing to depend through
        weights = [torch.rand(p.shape, generator=g, dtype=p.dtype).to(p.device) for p in pieces]
        total = sum((p * w).sum() for p, w in zip(pieces, weights, strict=True))
        grads = torch.autograd.grad(total, pieces, retain_graph=True, allow_unused=True)
        for got, w in zip(grads, weights, strict=True):
            if got is not None and not torch.allclose(got, w, rtol=1e-6, atol=1e-9):
                raise ModelCodeError(
                    f"{name} computes attention one head at a time, and in its layer {layer} "
                    "one head reads another's result (two attentions computed one after the "
                    "other in one module?): vitviz can't tell its layers apart; compute each "
                    "attention in a module of its own"
                )


def _raw(log: CaptureLog) -> list[Tensor]:
    """Each record's (B, H, N, N) tensor in raw order (the probing pass runs with no plan, so
    records and the log's attentions are the same list)."""
    if len(log.places) != len(log.attentions):
        raise ValueError("plan_heads needs the probing pass's log (no plan, calls watched)")
    return list(log.attentions)


def _check_one_input(group: _Group, name: str) -> None:
    """The heads of one layer read one input (the module call of a loop trivially does)."""
    inputs = [t for t in group.inputs if t is not None]
    if not group.by_list or not inputs:
        return
    first = inputs[0]
    same = all(
        t is first or (t.shape == first.shape and bool(torch.equal(t, first))) for t in inputs
    )
    if len(inputs) != len(group.inputs) or not same:
        raise ModelCodeError(
            f"{name}: the one-head modules of {group.where} don't all read one input, so "
            "vitviz can't tell that they are the heads of one layer"
        )


def one_per_layer(log: CaptureLog, tokens: int) -> tuple[HeadPlan, str] | None:
    """(N, N) softmaxes of one image that no module groups (one head per layer): each its own
    layer, so a batch's (one per image) assemble as they do on one image."""
    records = [
        i
        for i, (a, source) in enumerate(zip(log.attentions, log.sources, strict=True))
        if source == ONE_MATRIX and a.shape[-1] == tokens
    ]
    if not records:
        return None
    note = (
        f"attention computed one head at a time: {len(records)} one-head softmaxes, one per layer"
    )
    return HeadPlan({r: (layer, 0, 1) for layer, r in enumerate(records)}), note
