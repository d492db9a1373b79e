"""benchmarks/ablation.py runs at --quick sizes and prints its table (no timing is asserted)."""

from __future__ import annotations

from test_benchmarks_smoke import run_quick, table_rows


def test_ablation_quick() -> None:
    out = run_quick("ablation.py", "--device", "cpu")
    rows = table_rows(out)
    assert [r[0][:3] for r in rows] == ["(a)", "(p)", "(k)", "(e)"]
    assert {r[0][:3]: r[5] for r in rows}["(k)"] == "≤ 1.3"
    assert "memory (peak resident growth)" in out
