"""benchmarks/against_revision.py reads print_table's rows, puts old and new medians side by side
and divides them."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import against_revision as ar
import pytest
from _common import print_table


def table(capsys, rows: list[tuple[str, ...]]) -> str:
    print("# a title line, then the table")
    print_table(["case", "median", "target"], rows)
    print("all targets met")
    return capsys.readouterr().out


def test_cells_are_read_by_row_and_column_in_one_unit(capsys) -> None:
    out = table(
        capsys, [("load", "950 ms", "≤ 2 s"), ("load", "12.0 s", "ok"), ("ratio", "1.5×", "")]
    )
    cells = ar.parse_tables(out)
    assert cells == {
        ("load", "median"): (pytest.approx(0.95), "ms"),
        ("load #2", "median"): (12.0, "s"),
        ("ratio", "median"): (1.5, "×"),
    }  # the targets and words are left out


def test_medians_of_each_side_and_their_ratio(capsys) -> None:
    old = [ar.parse_tables(table(capsys, [("load", t, "")])) for t in ("1.00 s", "900 ms", "5 s")]
    new = [ar.parse_tables(table(capsys, [("load", t, "")])) for t in ("500 ms", "600 ms", "0.4 s")]
    new[0][("only new", "median")] = (3.0, "")
    rows = {r[0]: r[2:] for r in ar.compare(old, new)}
    assert rows["load"] == ("1 s", "500 ms", "0.50")  # medians 1 s and 0.5 s, each in its unit
    assert rows["only new"] == ("—", "3", "—")
