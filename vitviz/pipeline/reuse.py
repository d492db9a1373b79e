"""The blocks below a knocked-out head computed once (DESIGN §5, "Interventions"): a pass that
changes nothing before block b hands every earlier block its own output from the full pass
(stacked for the batch) instead of running it.

Written over what the accessor names (``Intermediates.block_modules``, ``projections``), for any
kind, where it is safe: every block runs once per pass and every tensor of its output is
batch-first (batch 1 in the full pass). Otherwise ``BlockCache.capture`` gives None and the
passes run whole. The passes it serves ask the accessor for their logits alone
(``logits_only``): the skipped blocks' heads are not read again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from torch import Tensor, nn

from vitviz.kindapi import Intermediates


def _leaves_batch_first(obj: Any) -> bool:
    if isinstance(obj, Tensor):
        return obj.ndim >= 1 and obj.shape[0] == 1
    if isinstance(obj, (tuple, list)):
        return all(_leaves_batch_first(o) for o in obj)
    return True  # None, numbers, layouts: the same for every batch


def _stacked(obj: Any, k: int) -> Any:
    if isinstance(obj, Tensor):
        return obj.repeat(k, *([1] * (obj.ndim - 1)))
    if isinstance(obj, tuple):
        return tuple(_stacked(o, k) for o in obj)
    if isinstance(obj, list):
        return [_stacked(o, k) for o in obj]
    return obj


class BlockCache:
    """Each block's output of a batch-1 pass, and which block holds each attention layer."""

    def __init__(self, blocks: Sequence[nn.Module], outputs: list[Any], owners: list[int]) -> None:
        self.blocks, self.outputs, self.owners = list(blocks), outputs, owners

    @classmethod
    def capture(
        cls, run: Callable[[], Intermediates], blocks: Sequence[nn.Module],
        projections: Sequence[nn.Module],
    ) -> tuple[Intermediates, BlockCache | None]:  # fmt: skip
        """``run()`` (the full pass, batch 1) with every block's output kept; the cache, or
        None where reusing them is not safe (``projections``: each attention layer's, to find
        its block)."""
        outputs: list[list[Any]] = [[] for _ in blocks]

        def keep(i: int) -> Callable:
            def hook(_m: nn.Module, _args: tuple, output: Any) -> None:
                outputs[i].append(output)

            return hook

        handles = [b.register_forward_hook(keep(i)) for i, b in enumerate(blocks)]
        try:
            base = run()
        finally:
            for handle in handles:
                handle.remove()
        owners = []
        for proj in projections:
            owner = next((i for i, b in enumerate(blocks) for m in b.modules() if m is proj), None)
            owners.append(-1 if owner is None else owner)
        once = all(len(o) == 1 for o in outputs)
        safe = once and all(_leaves_batch_first(o[0]) for o in outputs)
        if not blocks or not safe or -1 in owners:
            return base, None
        return base, cls(blocks, [o[0] for o in outputs], owners)

    @contextmanager
    def below(self, layer: int, k: int) -> Iterator[None]:
        """While open, the blocks before attention layer ``layer``'s block return their kept
        outputs stacked ``k`` times (each made when its block is called) instead of running;
        their attention layers do not run, so a pass inside reads its logits alone."""
        patched = []
        try:
            for i in range(self.owners[layer]):

                def forward(*args: Any, _out: Any = self.outputs[i], **kw: Any) -> Any:
                    return _stacked(_out, k)

                self.blocks[i].forward = forward  # type: ignore[method-assign]
                patched.append(self.blocks[i])
            yield
        finally:
            for block in patched:
                del block.forward
