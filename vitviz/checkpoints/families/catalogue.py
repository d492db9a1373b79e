"""The families table: every checkpoint family vitviz reads, the kind of model it becomes and
the parts it maps onto, in the order they are tried. One source for ``vitviz-cli families``,
Help ▸ Supported checkpoints and the table of docs/checkpoints.md (a test holds it to this)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from vitviz.checkpoints.families import own as own_family
from vitviz.checkpoints.families.base import Family, FamilyInfo


@dataclass(frozen=True)
class FamilyRow:
    """One line of the table: the registry name, the kind's label and what the family is."""

    name: str
    kind: str  # "ViT", "Swin Transformer", ... ("any" for vitviz's own format)
    info: FamilyInfo


def _row(family: Family, kind: str) -> FamilyRow:
    if family.info is None:
        raise ValueError(f"checkpoint family {family.name!r} has no FamilyInfo for the table")
    return FamilyRow(family.name, kind, family.info)


def family_rows() -> list[FamilyRow]:
    """Every registered family, in the order a checkpoint is tried against them."""
    from vitviz.kindapi import all_kinds

    rows = [_row(own_family.FAMILY, "any")]
    for kind in all_kinds():
        rows.extend(_row(family, kind.label) for family in kind.families)
    return rows


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def families_markdown(rows: list[FamilyRow]) -> str:
    """The families table of docs/checkpoints.md."""
    out = [
        "| family | becomes | what you have | forms | parts it maps onto |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        i = r.info
        out.append(
            f"| {_cell(i.label)} | {_cell(r.kind)} | {_cell(i.names)} | {_cell(i.forms)} | "
            f"{_cell('; '.join(i.parts))} |"
        )
    return "\n".join(out)


def families_text(rows: list[FamilyRow]) -> str:
    """The plain-text listing of ``vitviz-cli families``: a block per family."""
    blocks = []
    for r in rows:
        i = r.info
        blocks.append(
            "\n".join(
                (
                    f"{i.label}  [{r.name}] -> {r.kind}",
                    f"    what you have: {i.names}",
                    f"    forms: {i.forms}",
                    f"    parts: {'; '.join(i.parts)}",
                )
            )
        )
    return "\n".join(blocks)


def families_json(rows: list[FamilyRow]) -> str:
    return json.dumps([{"name": r.name, "kind": r.kind, **asdict(r.info)} for r in rows], indent=2)
