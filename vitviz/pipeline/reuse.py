"""The blocks below a knocked-out head computed once (DESIGN §5, "Interventions"): a pass that
changes nothing before block b hands every earlier block its own output from the full pass
(stacked for the batch) instead of running it.

Written over what the accessor names (``Intermediates.block_modules``, ``projections``), for any
kind, where it is safe: every block runs once per pass and every tensor of its output is
batch-first (batch 1 in the full pass). Otherwise ``BlockCache.capture`` gives None and the
passes run whole.
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
    """Each block's output of a batch-1 pass, each attention layer's projection input, and which
    block holds each attention layer."""

    def __init__(
        self, blocks: Sequence[nn.Module], outputs: list[Any], projections: Sequence[nn.Module],
        inputs: list[Tensor], owners: list[int],
    ) -> None:  # fmt: skip
        self.blocks, self.outputs, self.owners = list(blocks), outputs, owners
        self.projections, self.inputs = list(projections), inputs

    @classmethod
    def capture(
        cls, run: Callable[[], Intermediates], blocks: Sequence[nn.Module],
        projections: Sequence[nn.Module],
    ) -> tuple[Intermediates, BlockCache | None]:  # fmt: skip
        """``run()`` (the full pass, batch 1) with every block's output and every projection's
        input kept; the cache, or None where reusing them is not safe."""
        outputs: list[list[Any]] = [[] for _ in blocks]
        inputs: list[list[Any]] = [[] for _ in projections]

        def keep(i: int) -> Callable:
            def hook(_m: nn.Module, _args: tuple, output: Any) -> None:
                outputs[i].append(output)

            return hook

        def keep_input(i: int) -> Callable:
            def hook(_m: nn.Module, args: tuple) -> None:
                inputs[i].append(args[0])

            return hook

        handles = [b.register_forward_hook(keep(i)) for i, b in enumerate(blocks)]
        handles += [p.register_forward_pre_hook(keep_input(i)) for i, p in enumerate(projections)]
        try:
            base = run()
        finally:
            for handle in handles:
                handle.remove()
        owners = []
        for proj in projections:
            owner = next((i for i, b in enumerate(blocks) for m in b.modules() if m is proj), None)
            owners.append(-1 if owner is None else owner)
        once = all(len(o) == 1 for o in [*outputs, *inputs])
        safe = once and all(_leaves_batch_first(o[0]) for o in [*outputs, *inputs])
        if not blocks or not safe or -1 in owners:
            return base, None
        kept = [o[0] for o in outputs]
        return base, cls(blocks, kept, projections, [i[0] for i in inputs], owners)

    @contextmanager
    def below(self, layer: int, k: int) -> Iterator[None]:
        """While open, the blocks before attention layer ``layer``'s block return their kept
        outputs stacked ``k`` times instead of running (their projections alone run, on their
        kept inputs, so that the accessor reads every head)."""
        upto = self.owners[layer]
        patched = []
        try:
            for i in range(upto):
                out = _stacked(self.outputs[i], k)
                projs = [
                    (p, _stacked(x, k))
                    for p, x, owner in zip(self.projections, self.inputs, self.owners, strict=True)
                    if owner == i
                ]

                def forward(*args: Any, _out: Any = out, _projs: list = projs, **kw: Any) -> Any:
                    for proj, x in _projs:
                        proj(x)
                    return _out

                self.blocks[i].forward = forward  # type: ignore[method-assign]
                patched.append(self.blocks[i])
            yield
        finally:
            for block in patched:
                del block.forward
