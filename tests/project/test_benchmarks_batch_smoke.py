"""benchmarks/batch_explain.py and analysis_memory.py run at --quick sizes and print their tables;
every benchmark refuses a device that is not here plainly (no timing is asserted)."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest
from script_main import run_script

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def test_batch_explain_quick(capfd: pytest.CaptureFixture[str]) -> None:
    args = ["--quick", "--no-check", "--device", "cpu", "--images", "5"]
    code, out, err = run_script(BENCHMARKS / "batch_explain.py", *args, capfd=capfd)
    assert code == 0, f"{out}\n{err}"
    assert "device: cpu (" in out
    assert "5 .npz and 15 PNG files written" in out  # rollout, relevance, heads per image
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in out.splitlines()
            if line.startswith("| (")]  # fmt: skip
    assert [r[0][:3] for r in rows] == ["(a)", "(b)", "(c)"]
    assert rows[0][4] == "baseline" and rows[1][4] == "info"  # the target is CUDA's
    assert all(float(r[2].replace(",", "")) > 0 for r in rows)  # images per second
    assert "WRONG RESULT" not in out


@pytest.mark.parametrize(
    "script",
    [
        "analysis_overhead.py",
        "rollout.py",
        "batch_explain.py",
        "train_throughput.py",
        "analysis_memory.py",
    ],
)
def test_a_missing_device_is_refused_plainly(
    script: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The script run as ``__main__`` in this process (no interpreter of its own to start): it
    exits 2 with its one line; any other exception (a traceback) fails the test."""
    path = BENCHMARKS / script
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # where the script's own imports are
    monkeypatch.setattr(sys, "argv", [str(path), "--quick", "--device", "cuda:99"])  # no 100th GPU
    with pytest.raises(SystemExit) as exited:
        runpy.run_path(str(path), run_name="__main__")
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "--device cuda:99: " in err and "Traceback" not in err


def test_analysis_memory_quick(capfd: pytest.CaptureFixture[str]) -> None:
    args = ["--quick", "--no-check", "--device", "cpu"]
    code, out, err = run_script(BENCHMARKS / "analysis_memory.py", *args, capfd=capfd)
    assert code == 0, f"{out}\n{err}"  # each case still in a fresh child
    assert "device: cpu (" in out and "fresh subprocess" in out
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in out.splitlines()
            if line.startswith("| (")]  # fmt: skip
    assert [r[0][:3] for r in rows] == ["(a)", "(b)", "(c)"]
    assert [r[5] for r in rows] == ["≤ 1.5", "≤ 1.5", "info"]
    assert all(float(r[4]) > 0 for r in rows)  # a peak was measured
