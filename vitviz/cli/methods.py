"""``vitviz-cli methods``: the method table listed (names for --method, parameters for --param),
as text, JSON or docs/methods.md's Markdown table. No method is named in this file."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable
from typing import TYPE_CHECKING

from vitviz.cli.common import EXIT_OK, SubParsers
from vitviz.cli.shared_options import add_listing_options

if TYPE_CHECKING:  # the table imports torch: only when a command runs, not to parse arguments
    from vitviz.explain.methods import Method
    from vitviz.explain.params import Parameter


def add_parser(subparsers: SubParsers) -> None:
    """Register ``methods`` on the CLI's sub-parsers."""
    p = subparsers.add_parser(
        "methods",
        help="list the explanation methods (names for --method, parameters for --param)",
        description="List the explanation methods: name (for --method; npz key map_<name>), "
        "label, parameters with their defaults and ranges (for --param METHOD.PARAMETER=VALUE; "
        "L and H are the model's layers and heads), what each needs (gradients, a head, the "
        "model), and the models each applies to.",
    )
    add_listing_options(p, "docs/methods.md")
    p.set_defaults(func=cmd_methods)


# -- listing ---------------------------------------------------------------------------------------


def parameter_text(p: Parameter) -> str:
    """One parameter as the listing shows it, e.g. "discard_ratio in 0.0..0.99 (default 0.0)"."""
    if p.choices is not None:
        values = " | ".join(str(c) for c in p.choices)
        return f"{p.name}: {values} (default {p.default})"
    if p.range is not None:
        lo, hi = p.range
        if p.per is not None:
            upper = "L−1" if p.per == "layer" else "H−1"
        else:
            upper = None if hi is None else str(hi)
        where = f"in {lo}..{upper}" if upper is not None else f"≥ {lo}"
        return f"{p.name} {where} (default {p.default})"
    return f"{p.name}: {p.type.__name__} (default {p.default})"


def _needs(m: Method) -> str:
    return m.needs


def methods_text(methods: Iterable[Method]) -> str:
    """The plain-text listing of ``vitviz-cli methods``."""
    blocks = []
    for m in methods:
        lines = [f"{m.name}  ({m.label})", f"    {m.description}"]
        lines.append(
            f"    npz key {m.key}; needs {_needs(m)}; applies to {', '.join(sorted(m.applies_to))}"
            f"; scaling {m.scaling}; cost {m.cost}"
        )
        for p in m.parameters:
            helps = f": {p.help}" if p.help else ""
            lines.append(f"    --param {m.name}.{parameter_text(p)}{helps}")
        if not m.parameters:
            lines.append("    no parameters")
        blocks.append("\n".join(lines))
    return "\n".join(blocks)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def methods_markdown(methods: Iterable[Method]) -> str:
    """The method table of docs/methods.md: one row per method of the table, in its order."""
    rows = [
        "| name | what it is | parameters (default) | needs | cost | applies to |",
        "|---|---|---|---|---|---|",
    ]
    for m in methods:
        params = "; ".join(f"`{parameter_text(p)}`" for p in m.parameters) or "none"
        rows.append(
            f"| `{m.name}` | {_cell(m.label)}: {_cell(m.description)} | {_cell(params)} | "
            f"{_needs(m)} | {_cell(m.cost)} | {', '.join(sorted(m.applies_to))} |"
        )
    return "\n".join(rows)


def cmd_methods(args: argparse.Namespace) -> int:
    from vitviz.explain.methods import all_methods

    methods = all_methods()
    if args.json:
        print(json.dumps([m.to_dict() for m in methods], indent=2))
    elif args.markdown:
        print(methods_markdown(methods))
    else:
        print(methods_text(methods))
    return EXIT_OK
