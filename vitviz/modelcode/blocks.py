"""Block outputs (hidden states) of an arbitrary model, found by watching its containers.

While ``watch_blocks`` is active, every child of every nn.ModuleList / nn.Sequential gets a
forward hook that notes its output; all hooks are removed on leaving, even on an exception.
``pick_blocks`` then chooses the container whose children are the L transformer blocks: each
called once, each mapping (B, N, D) (or (N, B, D)) to the same shape.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle


@dataclass
class _Call:
    container: int  # index of the container in module order
    child: int
    input_shape: tuple[int, ...] | None
    output: Tensor | None


@dataclass
class BlockWatch:
    containers: list[nn.Module] = field(default_factory=list)
    calls: list[_Call] = field(default_factory=list)


def _first_tensor(value: Any) -> Tensor | None:
    if isinstance(value, Tensor):
        return value
    if isinstance(value, (tuple, list)) and value and isinstance(value[0], Tensor):
        return value[0]
    return None


@contextmanager
def watch_blocks(model: nn.Module) -> Iterator[BlockWatch]:
    """Note the output of every child of every ModuleList / Sequential during the block."""
    watch = BlockWatch()
    handles: list[RemovableHandle] = []

    def make_hook(ci: int, child: int):
        def hook(module: nn.Module, args: tuple, output: Any) -> None:
            x = _first_tensor(args)
            y = _first_tensor(output)
            shape = tuple(x.shape) if x is not None else None
            kept = y if y is not None and y.ndim == 3 else None
            watch.calls.append(_Call(ci, child, shape, kept))

        return hook

    try:
        for module in model.modules():
            if isinstance(module, (nn.ModuleList, nn.Sequential)) and len(module) > 0:
                ci = len(watch.containers)
                watch.containers.append(module)
                for j, child in enumerate(module):
                    handles.append(child.register_forward_hook(make_hook(ci, j)))
        yield watch
    finally:
        for handle in handles:
            handle.remove()


def pick_blocks(watch: BlockWatch, depth: int, tokens: int, batch: int) -> list[Tensor]:
    """The L × (B, N, D) outputs of the container holding the blocks, or [] if none fits."""
    for ci in range(len(watch.containers)):
        calls = [c for c in watch.calls if c.container == ci]
        if len(calls) != depth or sorted(c.child for c in calls) != list(range(depth)):
            continue
        outs = []
        for c in calls:
            y = c.output
            if y is None or c.input_shape != tuple(y.shape):
                break
            if y.shape[0] == batch and y.shape[1] == tokens:
                outs.append(y)
            elif y.shape[0] == tokens and y.shape[1] == batch:
                outs.append(y.transpose(0, 1))  # (N, B, D): batch_first=False layers
            else:
                break
        else:
            return outs
    return []


def block_containers(watch: BlockWatch, tokens: int, batch: int) -> list[nn.Module]:
    """The containers whose children all look like transformer blocks: each called once,
    mapping (B, N, D) (or (N, B, D)) to the same shape."""
    found = []
    for ci, container in enumerate(watch.containers):
        calls = [c for c in watch.calls if c.container == ci]
        n = len(container)
        if n < 1 or sorted(c.child for c in calls) != list(range(n)):
            continue
        if all(
            c.output is not None
            and c.input_shape == tuple(c.output.shape)
            and {c.output.shape[0], c.output.shape[1]} == {batch, tokens}
            for c in calls
        ):
            found.append(container)
    return found


def block_counts(watch: BlockWatch, tokens: int, batch: int) -> list[int]:
    """How many children each container of transformer blocks (``block_containers``) has."""
    return [len(c) for c in block_containers(watch, tokens, batch)]
