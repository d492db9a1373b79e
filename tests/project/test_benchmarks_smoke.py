"""The benchmark scripts run at --quick sizes and print their tables; no timing is asserted."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from script_main import run_script

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def run_quick(capfd: pytest.CaptureFixture[str], script: str, *extra: str) -> str:
    """Run ``benchmarks/<script> --quick --no-check`` as ``__main__`` in this process (no
    interpreter of its own to start; its children still start theirs); fail with its output if
    it fails."""
    code, out, err = run_script(BENCHMARKS / script, "--quick", "--no-check", *extra, capfd=capfd)
    assert code == 0, f"{script} exited {code}\n{out}\n{err}"
    return out


def table_rows(out: str) -> list[list[str]]:
    """Cells of the markdown table rows (header and separator dropped)."""
    lines = [line for line in out.splitlines() if line.startswith("|")]
    assert len(lines) >= 3, f"no table printed:\n{out}"
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:]]


def test_analysis_overhead_quick(capfd) -> None:
    out = run_quick(capfd, "analysis_overhead.py", "--device", "cpu", "--image-size", "48")
    assert "device: cpu (" in out and "at 48×48, patch 8" in out
    rows = table_rows(out)
    targets = {r[0].split(" ")[0]: r[5] for r in rows}  # "(a)", "(b)", ... -> target cell
    assert targets["(a)"] == "baseline"
    assert targets["(b)"] == "≤ 1.15"
    assert targets["(c)"] == "≤ 3.5"
    assert targets["(b')"] == "info"  # from a PIL image, preprocessing included
    assert targets["(b+s)"] == "info"  # the head statistics read too, as the window does
    assert targets["(q)"] == "info"  # a query change on an analysis made
    assert "peak RSS:" in out
    assert "WRONG RESULT" not in out


def test_rollout_quick_values_agree(capfd) -> None:
    out = run_quick(capfd, "rollout.py", "--device", "cpu")
    assert "device: cpu (" in out
    rows = table_rows(out)
    assert len(rows) == 8  # two sizes × (raw, fused, prepared Ã_l, read floor)
    checked = [row for row in rows if "read floor" not in row[1]]
    assert len(checked) == 6
    for row in checked:
        diff = float(row[6])
        assert diff <= 1e-5, f"row method and full product disagree: {row}"
        assert row[7] != "WRONG"
    assert "WRONG RESULT" not in out


def test_structure_counts_what_the_import_graph_holds(capfd) -> None:
    sys.path.insert(0, str(BENCHMARKS.parent / "tests"))
    from import_graph import VITVIZ_LAYERS, circles, import_graph, upward_imports

    graph = import_graph(BENCHMARKS.parent / "vitviz")
    rows = {r[0]: r[1] for r in table_rows(run_quick(capfd, "structure.py"))}
    assert rows["import circles"] == str(len(circles(graph)))
    assert rows["upward imports"] == str(len(upward_imports(graph, VITVIZ_LAYERS)))
    assert rows["modules"] == str(len(graph)) and len(graph) > 100


def test_clip_quick(capfd) -> None:
    out = run_quick(capfd, "clip.py", "--device", "cpu")
    targets = {r[0].split(" ")[0]: r[5] for r in table_rows(out)}
    assert targets == {
        "(a)": "baseline", "(a')": "baseline", "(b)": "≤ 1.15", "(c)": "≤ 1.5", "(c0)": "info",
        "(r)": "≤ 0.3", "(d)": "≤ 300",
    }  # fmt: skip
    assert "kept graph of one image" in out and "none kept" not in out
    assert "WRONG RESULT" not in out and "analysis logits differ" not in out


def test_analysis_profile_quick(capfd) -> None:
    out = run_quick(capfd, "analysis_profile.py", "--model", "cifar10-tutorial", "--cases", "a,c")
    assert out.count("wall per call under the profiler") == 2
    assert "## (c) analyze(gradients=True) + relevance" in out and "Self CPU time total" in out
