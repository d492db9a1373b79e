"""Activation recomputation (checkpointing) that keeps torch's compiler out of the analysis.

torch.utils.checkpoint imports torch._dynamo on its first call, and that import makes the
compiler's cache folder (``$TMPDIR/torchinductor_<user>``): an explain would write a folder
and pay for ~300 compiler modules. This is the same idea in a few lines: the forward pass
builds the normal autograd graph (so hooks on its outputs still fire) but keeps none of the
block's saved activations; the first time the backward pass needs one, the block runs once
more and hands back what it saved, in the same order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch
from torch import Tensor

T = TypeVar("T")


class _Recomputed:
    """The saved tensors of one call of ``fn(*args)``, made again on demand (by position)."""

    def __init__(self, fn: Callable[..., object], args: tuple[object, ...]) -> None:
        self.fn = fn
        self.args = tuple(
            a.detach().requires_grad_(a.requires_grad) if isinstance(a, Tensor) else a for a in args
        )
        self.count = 0  # tensors the forward pass saved
        self.kept: dict[int, Tensor] = {}  # those kept as they are (parameters, leaves)
        self.made: dict[int, Tensor] = {}  # recomputed ones not yet handed back

    def pack(self, tensor: Tensor) -> int:
        index = self.count
        self.count += 1
        if tensor.is_leaf:  # a parameter or an input leaf: keeping it costs no memory
            self.kept[index] = tensor
        return index

    def unpack(self, index: int) -> Tensor:
        if index in self.kept:
            return self.kept[index]
        if index not in self.made:
            self._run_again()
        return self.made.pop(index)

    def _run_again(self) -> None:
        saved: list[Tensor] = []

        def keep(tensor: Tensor) -> int:
            # The recomputed graph is never run backward: it holds a number, not the tensor.
            # A saved output held as itself would hold its own graph (output -> grad_fn ->
            # saved output), a cycle through C++ that no collector frees: one block's
            # activations lost for every backward pass.
            saved.append(tensor.detach())
            return len(saved) - 1

        with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(keep, _never_read):
            self.fn(*self.args)
        if len(saved) != self.count:
            raise RuntimeError(
                f"recomputing a block saved {len(saved)} tensors, its forward pass {self.count}"
            )
        self.made = {i: t for i, t in enumerate(saved) if i not in self.kept}


def _never_read(index: int) -> Tensor:
    raise RuntimeError("a recomputed block's own graph was run backward")


def recomputed(fn: Callable[..., T], *args: object) -> T:
    """``fn(*args)`` whose saved activations are dropped and made again (by running ``fn`` once
    more, deterministically) when the backward pass needs them. ``fn`` must do the same
    operations on each run (no dropout in training mode)."""
    state = _Recomputed(fn, args)
    with torch.autograd.graph.saved_tensors_hooks(state.pack, state.unpack):
        return fn(*args)
