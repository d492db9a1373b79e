"""benchmarks/swin_window.py runs at --quick sizes, prints its table and finds the maps right."""

from __future__ import annotations

from test_benchmarks_smoke import run_quick, table_rows


def test_swin_window_benchmark_quick(capfd) -> None:
    out = run_quick(capfd, "swin_window.py")
    targets = {r[0].split(" ")[0]: r[4] for r in table_rows(out)}
    assert targets == {"(a)": "info", "(q)": "≤ 20 ms", "(r)": "info"}
    assert "WRONG RESULT" not in out
