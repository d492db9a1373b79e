"""What a model's forward returns, read as written: which tensor holds the classes, and whether
it holds logits, probabilities or log-probabilities.

Tutorial models return ``logits``, ``(logits, attention)``, ``(features, logits)``,
``{"out": logits}``, an object with ``.logits``, ``F.softmax(logits)`` or
``F.log_softmax(logits)``. ``find_output`` picks the (B, C) tensor once, on the probing pass,
and says which; ``OutputReading.read`` takes the same one on every later pass. Probabilities are
handed on as their log: a softmax of it gives the model's own probabilities back (shown as
given) and gradient methods target the log-probability, as they do for a log-softmax output.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from vitviz.modelcode.errors import ModelCodeError

LOGITS, PROBABILITIES, LOG_PROBABILITIES = "logits", "probabilities", "log-probabilities"
SUM_TOLERANCE = 1e-4  # |Σ p − 1| for a row of probabilities (float32 softmax rounding)
_Path = tuple[Any, ...]  # tuple indices, dict keys and ".logits" on the way to the tensor


def _step(output: Any, key: Any) -> Any:
    if key == ".logits":
        return output.logits
    return output[key]


def _follow(output: Any, path: _Path) -> Any:
    for key in path:
        output = _step(output, key)
    return output


def _describe(path: _Path) -> str:
    if not path:
        return "the returned tensor"
    parts = []
    for key in path:
        if key == ".logits":
            parts.append("its .logits")
        elif isinstance(key, int):
            parts.append(f"element {key} of the returned tuple")
        else:
            parts.append(f"the returned dict's {key!r}")
    return ", ".join(parts)


def _tensors(output: Any, path: _Path = (), depth: int = 2) -> Iterator[tuple[_Path, Tensor]]:
    """(path, tensor) for the tensors a forward returned, outer first, ``logits`` first."""
    if isinstance(output, Tensor):
        yield path, output
        return
    if depth == 0:
        return
    if isinstance(output, Mapping):
        keys = sorted(output, key=lambda k: k != "logits")
        for key in keys:
            yield from _tensors(output[key], (*path, key), depth - 1)
    elif isinstance(getattr(output, "logits", None), Tensor):
        yield (*path, ".logits"), output.logits
    elif isinstance(output, (tuple, list)):
        for i, value in enumerate(output):
            yield from _tensors(value, (*path, i), depth - 1)


def output_kind(t: Tensor) -> str:
    """'probabilities' when every row is ≥ 0 and sums to 1, 'log-probabilities' when every
    row is ≤ 0 and its exp sums to 1, else 'logits' (one class: always logits)."""
    if t.ndim != 2 or t.shape[1] < 2 or not torch.isfinite(t).all():
        return LOGITS
    t = t.detach().double()
    if (t >= 0).all() and ((t.sum(-1) - 1).abs() < SUM_TOLERANCE).all():
        return PROBABILITIES
    if (t <= 0).all() and ((t.exp().sum(-1) - 1).abs() < SUM_TOLERANCE).all():
        return LOG_PROBABILITIES
    return LOGITS


@dataclass(frozen=True)
class OutputReading:
    """Where the class scores are in what the forward returns, and what they are."""

    path: _Path = ()
    kind: str = LOGITS
    others: str = ""  # what else the forward returned, for the note

    def scores(self, output: Any) -> Tensor:
        """The (B, C) tensor as the model gave it."""
        try:
            t = _follow(output, self.path)
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise ModelCodeError(
                f"the model's output no longer has {_describe(self.path)}: {exc!r}"
            ) from exc
        if not isinstance(t, Tensor):
            raise ModelCodeError(f"{_describe(self.path)} is a {type(t).__name__}, not a tensor")
        return t

    def read(self, output: Any) -> Tensor:
        """The (B, C) scores vitviz uses: logits or log-probabilities (log p for probabilities,
        so softmax gives p back)."""
        t = self.scores(output)
        if self.kind == PROBABILITIES:
            return t.clamp_min(torch.finfo(t.dtype).tiny).log()
        return t

    def note(self) -> str:
        """For the model info: which tensor was taken and what it holds."""
        parts = []
        if self.path:
            parts.append(f"the class scores are {_describe(self.path)}{self.others}")
        if self.kind == PROBABILITIES:
            parts.append(
                "the model returns probabilities (rows sum to 1): they are shown as given; "
                "gradient methods target their log"
            )
        elif self.kind == LOG_PROBABILITIES:
            parts.append(
                "the model returns log-probabilities (log-softmax): the probabilities shown "
                "are their exp; gradient methods target them"
            )
        return "; ".join(parts)


def find_output(output: Any, batch: int | None = None, classes: int | None = None) -> OutputReading:
    """The reading of ``output``: the one (B, C) tensor (``logits`` by name first; else the
    only 2-D tensor of batch rows, or among several the only one ``classes`` wide, ``classes``
    being the width of the model's last Linear), with its kind. ModelCodeError when there is
    none, or several that nothing tells apart (a wrong pick would show another tensor's map)."""
    found = list(_tensors(output))
    fits = [(p, t) for p, t in found if t.ndim == 2 and (batch is None or t.shape[0] == batch)]
    shapes = ", ".join(f"{_describe(p)} ({_shape(t)})" for p, t in found) or "none"
    if not fits:
        raise ModelCodeError(
            f"the model returned a {type(output).__name__} with no (batch, classes) tensor in it "
            f"(tensors: {shapes}); vitviz needs the class scores as a (batch, classes) tensor, "
            "alone or in a tuple or dict"
        )
    named = [f for f in fits if f[0] and f[0][-1] in ("logits", ".logits")]
    wide = [f for f in fits if classes is not None and f[1].shape[1] == classes]
    pick = next((c for c in (fits, named, wide) if len(c) == 1), None)
    if pick is None:
        raise ModelCodeError(
            f"the model returned several (batch, n) tensors ({shapes}) and vitviz can't tell "
            "which holds the class scores; return the logits alone, or under the key 'logits'"
        )
    path, t = pick[0]
    left = [f"{_describe(p)} ({_shape(x)})" for p, x in found if p != path]
    others = f"; left out: {', '.join(left)}" if left else ""
    return OutputReading(path, output_kind(t), others)


def _shape(t: Tensor) -> str:
    return "×".join(map(str, t.shape)) or "scalar"


def head_width(model: torch.nn.Module) -> int | None:
    """out_features of the model's last Linear (its classifier in tutorial code), or None."""
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    return linears[-1].out_features if linears else None
