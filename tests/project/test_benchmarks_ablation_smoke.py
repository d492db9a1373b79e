"""benchmarks/ablation.py runs at --quick sizes and prints its tables (no timing is asserted)."""

from __future__ import annotations

from test_benchmarks_smoke import run_quick, table_rows


def test_ablation_quick(capfd) -> None:
    out = run_quick(capfd, "ablation.py", "--device", "cpu", "--launch", "0")
    timed, rest = out.split("the plans' passes")
    plans, memory = rest.split("memory, each case in a fresh process")
    rows = table_rows(timed)
    assert [r[0][:3] for r in rows] == ["(a)", "(p)", "(k)", "(e)", "(g)", "(g)"]
    assert {r[0][:3]: r[5] for r in rows[:4]}["(k)"] == "≤ 1.3"
    assert rows[3][5] == "≤ 0.6" and rows[4][5] == "info"  # the CPU's own plan is per layer
    planned = table_rows(plans)
    per_layer, grouped = (next(r for r in planned if r[0].startswith(c)) for c in ("(e", "(g"))
    assert per_layer[2] == grouped[2]  # the same rows (every head once) …
    assert int(grouped[4]) < int(per_layer[4])  # … in fewer layer runs
    mem = table_rows(memory)
    assert [r[0][:3] for r in mem] == ["(p)", "(e)", "(g)"] and mem[1][4] == "≤ 1.5"
    assert all(float(r[1]) > 0 for r in mem)  # each child measured a peak of its own
