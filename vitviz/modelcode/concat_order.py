"""Which slice of the output projection's input each listed head feeds (no Qt).

Heads held in a ModuleList are numbered by their index in it (``vitviz.modelcode.heads``), and
a head's number is the slice of the projection's input its output fills: head h is the
(h·d, (h+1)·d) columns of ``proj(torch.cat(outputs, -1))``. A forward that concatenates them in
another order (``torch.cat(outs[::-1], -1)``) would show each head's map under another head's
number. While ``watch_concat`` is active the heads' outputs (B, N, d) and the inputs of the
Linears of the module holding the list (B, N, H·d) are kept; ``check`` finds the Linear input
made of the heads' outputs, slice by slice, and refuses one made of them in another order. A
projection it can't find (the heads' outputs summed, reshaped, or mixed first) is not judged.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle

from vitviz.modelcode.errors import ModelCodeError


@dataclass
class ConcatWatch:
    """Per head list: its heads' last outputs, and the Linear inputs seen in its holder."""

    outputs: dict[str, list[Tensor | None]] = field(default_factory=dict)
    inputs: dict[str, list[Tensor]] = field(default_factory=dict)

    def check(self, name: str) -> None:
        """ModelCodeError when a Linear of a list's holder reads its heads in another order."""
        for where, outs in self.outputs.items():
            order = _order_read(outs, self.inputs[where])
            if order is not None and order != list(range(len(outs))):
                raise ModelCodeError(
                    f"{name}: the output projection beside {where} reads its heads in the "
                    f"order {', '.join(map(str, order))}, not as listed: numbered by the list, "
                    "each head's map would carry another head's number; concatenate them in "
                    "their list order"
                )


def _order_read(outs: list[Tensor | None], inputs: list[Tensor]) -> list[int] | None:
    """The head whose output each slice of a Linear input is, in slice order; None when no
    Linear input is made of the heads' outputs."""
    if not outs or any(o is None for o in outs):
        return None
    first = outs[0]
    d, H = first.shape[-1], len(outs)
    for x in inputs:
        if x.shape[:-1] != first.shape[:-1] or x.shape[-1] != H * d:
            continue
        order = []
        for part in x.split(d, dim=-1):
            found = [
                h for h, o in enumerate(outs) if o.shape == part.shape and torch.equal(o, part)
            ]
            if len(found) != 1:
                break
            order.append(found[0])
        else:
            if sorted(order) == list(range(H)):
                return order
    return None


@contextmanager
def watch_concat(model: nn.Module, lists: tuple[str, ...]) -> Iterator[ConcatWatch]:
    """While active, the outputs of the heads in the ModuleLists ``lists`` (qualified names)
    and the inputs of every other Linear of the module holding each list are kept. Every hook
    is removed on leaving, even on an exception."""
    watch = ConcatWatch()
    modules = dict(model.named_modules())
    handles: list[RemovableHandle] = []

    def keep_output(where: str, h: int):
        def hook(module: nn.Module, args: tuple, output: object) -> None:
            watch.outputs[where][h] = output.detach() if isinstance(output, Tensor) else None

        return hook

    def keep_input(where: str):
        def hook(module: nn.Module, args: tuple) -> None:
            if args and isinstance(args[0], Tensor):
                watch.inputs[where].append(args[0].detach())

        return hook

    try:
        for where in lists:
            heads = modules.get(where)
            holder = modules.get(where.rpartition(".")[0]) if "." in where else model
            if not isinstance(heads, (nn.ModuleList, nn.Sequential)) or holder is None:
                continue
            watch.outputs[where] = [None] * len(heads)
            watch.inputs[where] = []
            inside = {id(m) for m in heads.modules()}
            for h, head in enumerate(heads):
                handles.append(head.register_forward_hook(keep_output(where, h)))
            for m in holder.modules():
                if isinstance(m, nn.Linear) and id(m) not in inside:
                    handles.append(m.register_forward_pre_hook(keep_input(where)))
        yield watch
    finally:
        for handle in handles:
            handle.remove()
