"""Nested JSON-like data (a checkpoint's provenance) as readable indented lines, for
``vitviz-cli info``: one ``key: value`` per line, nested objects indented under their key."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from vitviz.core.printable import printable

MAX_DEPTH = 6  # deeper objects are shown as "{…}" / "[…]"
MAX_ITEMS = 50  # keys per object and items per list shown; the rest are counted


def scalar_text(value: Any) -> str:
    """One value as text: floats to 6 significant digits, None as "none", text made printable."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        text = f"{value:.6g}"
        return text if any(c in text for c in ".eni") else f"{text}.0"  # 4.0 stays a float
    if isinstance(value, str) and not value:
        return '""'
    return printable(str(value))


def _is_flat_list(value: Any) -> bool:
    return (
        isinstance(value, Sequence)
        and not isinstance(value, (str, bytes))
        and not any(isinstance(v, (Mapping, list, tuple)) for v in value)
    )


def _inline(value: Sequence[Any]) -> str:
    shown = ", ".join(scalar_text(v) for v in value[:MAX_ITEMS])
    more = f", … ({len(value) - MAX_ITEMS} more)" if len(value) > MAX_ITEMS else ""
    return f"[{shown}{more}]"


def tree_lines(data: Mapping[str, Any], indent: int = 2, depth: int = 0) -> list[str]:
    """``data`` as lines: ``key: value`` with the values of one level aligned; a nested object
    or a list of objects goes on the lines below its key, indented by ``indent`` more."""
    keys = list(data)[:MAX_ITEMS]
    width = max((len(printable(str(k))) for k in keys), default=0) + 2
    pad = " " * (indent * depth)
    lines = []
    for key in keys:
        value = data[key]
        label = f"{pad}{printable(str(key)) + ':':<{width}}"
        if isinstance(value, Mapping) and value:
            if depth + 1 >= MAX_DEPTH:
                lines.append(f"{label}{{…}}")
            else:
                lines.append(label.rstrip())
                lines += tree_lines(value, indent, depth + 1)
        elif isinstance(value, Mapping):
            lines.append(f"{label}{{}}")
        elif isinstance(value, (list, tuple)) and not _is_flat_list(value):
            if depth + 1 >= MAX_DEPTH:
                lines.append(f"{label}[…]")
            else:
                lines.append(label.rstrip())
                items = {f"[{i}]": v for i, v in enumerate(value)}
                lines += tree_lines(items, indent, depth + 1)
        elif isinstance(value, (list, tuple)):
            lines.append(f"{label}{_inline(value)}")
        else:
            lines.append(f"{label}{scalar_text(value)}")
    if len(data) > MAX_ITEMS:
        lines.append(f"{pad}… ({len(data) - MAX_ITEMS} more)")
    return lines
