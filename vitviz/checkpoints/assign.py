"""Put a state dict into a freshly built model, or say exactly what does not fit."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeVar

from torch import Tensor, nn

from vitviz.checkpoints.errors import CheckpointError

M = TypeVar("M", bound=nn.Module)


def few(items: Sequence[str], n: int = 4) -> str:
    """The first ``n`` items, and how many more."""
    shown = ", ".join(items[:n])
    return shown + (f" and {len(items) - n} more" if len(items) > n else "")


def assign_exactly(model: M, state: Mapping[str, Tensor], what: str = "model") -> M:
    """``model`` (built on the meta device) holding exactly ``state``, in eval mode, with no second
    copy of the weights. CheckpointError naming missing, unexpected, mis-shaped and
    non-floating-point tensors (an int8 tensor where a weight belongs is refused, not cast)."""
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    wrong = [
        f"{k} {tuple(state[k].shape)} ({what} needs {tuple(expected[k].shape)})"
        for k in expected
        if k in state and state[k].shape != expected[k].shape
    ]
    not_float = [
        f"{k} {str(state[k].dtype).removeprefix('torch.')}"
        for k in expected
        if k in state and expected[k].is_floating_point() and not state[k].is_floating_point()
    ]
    problems = [
        f"{label} {few(keys)}"
        for label, keys in (
            ("missing", missing),
            ("unexpected", unexpected),
            ("wrong shape", wrong),
            ("not floating-point numbers", not_float),
        )
        if keys
    ]
    if problems:
        raise CheckpointError(f"The weights do not fit the {what}: " + "; ".join(problems) + ".")
    model.load_state_dict(dict(state), strict=True, assign=True)
    return model.eval()
