"""Which layers an analysis keeps: ``analyze(..., layers=...)`` and ``vitviz-cli explain --layers``.

Keeping fewer layers is a way to fit a big model's analysis in memory: the forward pass runs
every layer unchanged, but only the chosen layers' attention (and gradients) are kept. A spec is
a sequence of 0-based layer indices (negative ones count from the end), or text: comma-separated
indices and inclusive ranges (``9,10,11``, ``0-3,11``), ``last:K`` (the last K layers) or
``all``. The result is sorted, each layer once.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Iterable, Sequence

from vitviz.core.errors import VitvizError

LayerSpec = str | Sequence[int] | None
SPEC_FORM = "indices and ranges (9,10,11 or 0-3), last:K, or all"
_RANGE = re.compile(r"^(\d+)\s*-\s*(\d+)$")
_LAST = re.compile(r"^last\s*:\s*(\S+)$", re.IGNORECASE)


class LayerSpecError(VitvizError):
    """A layer choice that can't be used: malformed, or a layer the model doesn't have.
    ``reason`` is the message without the spec (the CLI names its option instead)."""

    def __init__(self, spec: LayerSpec, reason: str) -> None:
        shown = repr(spec) if isinstance(spec, str) else str(list(spec or ()))
        super().__init__(f"layers={shown}: {reason}")
        self.reason = reason


class LayersNotKeptError(VitvizError):
    """A map or layer asked of an analysis that did not keep the layers it needs."""


class _BadSpecError(Exception):
    """Why a spec is refused (becomes a LayerSpecError naming the spec)."""


def parse_layers(spec: LayerSpec, depth: int) -> tuple[int, ...] | None:
    """The model layers ``spec`` keeps (sorted, 0..depth-1), or None for every layer.

    ``depth``: the model's layers. LayerSpecError (one line) for a bad spec or a layer out of
    range."""
    if spec is None:
        return None
    try:
        chosen = _parse_text(spec, depth) if isinstance(spec, str) else _indices(spec, depth)
        if not chosen:
            raise _BadSpecError(f"choose at least one layer; expected {SPEC_FORM}")
    except _BadSpecError as exc:
        raise LayerSpecError(spec, str(exc)) from None
    kept = tuple(sorted(set(chosen)))
    return None if kept == tuple(range(depth)) else kept


def _parse_text(text: str, depth: int) -> list[int]:
    spec = text.strip()
    if spec.lower() == "all":
        return list(range(depth))
    last = _LAST.match(spec)
    if last is not None:
        k = last.group(1)
        if not k.isdigit() or int(k) < 1:
            raise _BadSpecError(f"last:K needs a whole number K of at least 1, got {k!r}")
        if int(k) > depth:
            raise _BadSpecError(f"last:{k} asks for more layers than the model's {depth}")
        return list(range(depth - int(k), depth))
    out: list[int] = []
    for part in spec.split(","):
        item = part.strip()
        m = _RANGE.match(item)
        if m is not None:
            lo, hi = int(m.group(1)), int(m.group(2))
            if lo > hi:
                raise _BadSpecError(f"the range {item} runs backwards")
            out.extend(_indices(range(lo, hi + 1), depth))
        elif re.fullmatch(r"-?\d+", item):
            out.extend(_indices([int(item)], depth))
        else:
            raise _BadSpecError(f"{item!r} is not a layer; expected {SPEC_FORM}")
    return out


def _indices(values: Iterable[object], depth: int) -> list[int]:
    """0-based layer indices (negative: from the end) checked against ``depth``."""
    out = []
    for value in values:
        try:
            if isinstance(value, bool):
                raise TypeError
            v = operator.index(value)  # int, numpy and torch integers
        except TypeError:
            raise _BadSpecError(f"{value!r} is not a layer index; expected {SPEC_FORM}") from None
        if not -depth <= v < depth:
            raise _BadSpecError(
                f"layer {v} is out of range: the model has {depth} layers (0..{depth - 1})"
            )
        out.append(v + depth if v < 0 else v)
    return out


def layers_text(layers: Sequence[int]) -> str:
    """(0, 1, 2, 3, 7, 9, 10) -> '0-3, 7, 9-10': runs of consecutive layers joined."""
    runs: list[list[int]] = []
    for v in layers:
        if runs and v == runs[-1][-1] + 1:
            runs[-1].append(v)
        else:
            runs.append([v])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)
