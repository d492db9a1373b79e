"""Which module calls are active at each attention a probing pass records (no Qt).

While ``watch_calls`` is active, every submodule gets a forward pre-hook and hook keeping a
stack of the calls in progress; the capture log asks for it at each record (``log.places``).
``vitviz.modelcode.heads`` reads these to group attention computed one head at a time.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle

from vitviz.modelcode.capture import CaptureLog

_PASSIVE = (nn.Softmax, nn.Dropout, nn.Identity)  # modules that don't make attention themselves


@dataclass(frozen=True)
class Call:
    """One active module call: the module's qualified name, a call number, its first input."""

    name: str
    number: int
    input: Tensor | None


@dataclass
class CallWatch:
    stack: list[Call] = field(default_factory=list)
    count: int = 0

    def where(self) -> tuple[Call, ...]:
        return tuple(self.stack)


@contextmanager
def watch_calls(model: nn.Module, log: CaptureLog) -> Iterator[CallWatch]:
    """While active, ``log.places`` gets the module calls active at each recorded attention
    (outermost first). Every hook is removed on leaving, even on an exception."""
    watch = CallWatch()
    handles: list[RemovableHandle] = []

    def enter(name: str):
        def hook(module: nn.Module, args: tuple) -> None:
            first = args[0] if args and isinstance(args[0], Tensor) else None
            watch.stack.append(Call(name, watch.count, first))
            watch.count += 1

        return hook

    def leave(module: nn.Module, args: tuple, output: object) -> None:
        if watch.stack:
            watch.stack.pop()

    try:
        for name, module in model.named_modules():
            if name and not isinstance(module, _PASSIVE):
                handles.append(module.register_forward_pre_hook(enter(name)))
                handles.append(module.register_forward_hook(leave))
        log.locate = watch.where
        yield watch
    finally:
        log.locate = None
        for handle in handles:
            handle.remove()
