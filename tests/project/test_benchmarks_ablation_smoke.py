"""benchmarks/ablation.py runs at --quick sizes and prints its tables (no timing is asserted)."""

from __future__ import annotations

from test_benchmarks_smoke import run_quick, table_rows


def test_ablation_quick() -> None:
    out = run_quick("ablation.py", "--device", "cpu")
    timed, memory = out.split("memory, each case in a fresh process")
    rows = table_rows(timed)
    assert [r[0][:3] for r in rows] == ["(a)", "(p)", "(k)", "(e)"]
    assert {r[0][:3]: r[5] for r in rows}["(k)"] == "≤ 1.3"
    mem = table_rows(memory)
    assert [r[0][:3] for r in mem] == ["(p)", "(e)"] and mem[1][4] == "≤ 1.5"
    assert all(float(r[1]) > 0 for r in mem)  # each child measured a peak of its own
