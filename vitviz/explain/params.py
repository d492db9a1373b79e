"""Parameter: one typed, bounded setting of an explanation method (DESIGN §5 table)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

PARAM_TYPES = (int, float, str, bool)
PER_MODEL = ("layer", "head")  # parameters that index the model's layers or heads


@dataclass(frozen=True)
class Parameter:
    """One setting of a method: name, Python type, default, inclusive bounds or choices.

    ``per`` = "layer" or "head" marks an index into the model's layers or heads: its upper
    bound is the model's (L − 1 or H − 1), its lower bound ``range[0]`` (−1 means the last
    layer, or the mean of the heads, where the method says so).
    """

    name: str
    type: type
    default: Any
    label: str
    range: tuple[float, float | None] | None = None  # inclusive; None upper: the model's
    choices: tuple[Any, ...] | None = None
    per: str | None = None
    step: float | None = None  # a spin box's step for numbers
    help: str = ""

    def __post_init__(self) -> None:
        if self.type not in PARAM_TYPES:
            raise ValueError(f"parameter {self.name!r}: type must be one of int, float, str, bool")
        if self.per is not None and (self.per not in PER_MODEL or self.type is not int):
            raise ValueError(f"parameter {self.name!r}: per must be 'layer' or 'head' on an int")
        self.check(self.default, _default=True)

    def bounds(
        self, num_layers: int | None = None, num_heads: int | None = None
    ) -> tuple[float | None, float | None]:
        """(lo, hi) inclusive for a number, with the model's size filled in where known."""
        if self.range is None:
            return None, None
        lo, hi = self.range
        if self.per == "layer" and num_layers is not None:
            hi = num_layers - 1
        elif self.per == "head" and num_heads is not None:
            hi = num_heads - 1
        return lo, hi

    def parse(self, text: str) -> Any:
        """A value from command-line text ("0.2", "max", "true"), checked."""
        text = text.strip()
        if self.type is bool:
            low = text.lower()
            if low not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(f"{self.name} must be true or false (got {text!r})")
            return self.check(low in ("true", "1", "yes"))
        if self.type in (int, float):
            try:
                value: Any = float(text) if self.type is float else int(text)
            except ValueError:
                kind = "a whole number" if self.type is int else "a number"
                raise ValueError(f"{self.name} must be {kind} (got {text!r})") from None
            return self.check(value)
        return self.check(text)

    def check(
        self,
        value: Any,
        num_layers: int | None = None,
        num_heads: int | None = None,
        _default: bool = False,
    ) -> Any:
        """``value`` converted to the type and checked against bounds/choices; ValueError with a
        plain message otherwise."""
        name = self.name
        if self.type is bool:
            if not isinstance(value, bool):
                raise ValueError(f"{name} must be true or false (got {value!r})")
        elif self.type is int:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"{name} must be a whole number (got {value!r})")
            if isinstance(value, float):
                if not value.is_integer():
                    raise ValueError(f"{name} must be a whole number (got {value!r})")
                value = int(value)
        elif self.type is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"{name} must be a number (got {value!r})")
            value = float(value)
            if not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number (got {value!r})")
        elif not isinstance(value, str):
            raise ValueError(f"{name} must be text (got {value!r})")
        if self.choices is not None and value not in self.choices:
            accepted = ", ".join(str(c) for c in self.choices)
            raise ValueError(f"{name} must be one of {accepted} (got {value!r})")
        if self.range is not None and not _default:
            lo, hi = self.bounds(num_layers, num_heads)
            if (lo is not None and value < lo) or (hi is not None and value > hi):
                raise ValueError(f"{name} must be {_interval(lo, hi)} (got {value!r})")
        return value

    def to_dict(self) -> dict[str, Any]:
        """JSON-able description (``vitviz-cli methods --json``)."""
        return {
            "name": self.name,
            "type": self.type.__name__,
            "default": self.default,
            "label": self.label,
            "range": list(self.range) if self.range is not None else None,
            "choices": list(self.choices) if self.choices is not None else None,
            "per": self.per,
            "step": self.step,
            "help": self.help,
        }


def _interval(lo: float | None, hi: float | None) -> str:
    if hi is None:
        return f"{lo} or more"
    if lo is None:
        return f"{hi} or less"
    return f"in {lo}..{hi}"
