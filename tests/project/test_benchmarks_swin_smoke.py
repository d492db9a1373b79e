"""benchmarks/swin.py runs at --quick sizes, prints its table and finds the analysis right."""

from __future__ import annotations

from test_benchmarks_smoke import run_quick, table_rows


def test_swin_benchmark_quick(capfd) -> None:
    out = run_quick(capfd, "swin.py")
    rows = table_rows(out)
    targets = {r[0].split(" ")[0]: r[5] for r in rows}  # "(a)", "(b)", ... -> target cell
    assert targets == {
        "(a)": "baseline",
        "(b)": "≤ 1.3",
        "(c)": "info",
        "(q)": "≤ 20 ms",
        "(m)": "≤ 1.5 × (w + a)",
    }
    assert "captured attention" in out and "peak RSS:" in out
    assert "WRONG RESULT" not in out
