"""``vitviz-cli families``: the checkpoint families vitviz reads, what each becomes and the parts
it maps onto, as text, JSON or docs/checkpoints.md's Markdown table. No family is named in this
file."""

from __future__ import annotations

import argparse

from vitviz.cli.common import EXIT_OK, SubParsers
from vitviz.cli.shared_options import add_listing_options


def add_parser(subparsers: SubParsers) -> None:
    """Register ``families`` on the CLI's sub-parsers."""
    p = subparsers.add_parser(
        "families",
        help="list the checkpoint families vitviz reads, with the parts each maps onto",
        description="List the checkpoint families, in the order a checkpoint is tried against "
        "them: who made such checkpoints and the names they go by, the forms vitviz reads, the "
        "kind of model each becomes and the parts of it the family uses.",
    )
    add_listing_options(p, "docs/checkpoints.md")
    p.set_defaults(func=cmd_families)


def cmd_families(args: argparse.Namespace) -> int:
    from vitviz.checkpoints.families.catalogue import (
        families_json,
        families_markdown,
        families_text,
        family_rows,
    )

    rows = family_rows()
    if args.json:
        print(families_json(rows))
    elif args.markdown:
        print(families_markdown(rows))
    else:
        print(families_text(rows))
    return EXIT_OK
