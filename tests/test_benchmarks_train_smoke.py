"""benchmarks/train_throughput.py runs at --quick sizes and prints its table; no timing asserts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.mark.parametrize("model", ["vit", "swin"])
def test_train_throughput_quick(model: str) -> None:
    env = {**os.environ, "PYTHONWARNINGS": "error"}
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / "train_throughput.py"), "--quick", "--no-check",
         "--steps", "6", "--model", model],
        cwd=BENCHMARKS.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| (")]
    assert len(rows) == 2, proc.stdout
    cells = [[c.strip() for c in row.strip("|").split("|")] for row in rows]
    assert cells[0][0].startswith("(a) tutorial") and cells[0][5] == "baseline"
    assert cells[1][0].startswith("(b) vitviz") and cells[1][5] == "≥ 2"
    for row in cells:
        assert float(row[1].replace(",", "")) > 0  # images per second
        assert row[3].endswith("MiB")  # peak RSS
    assert "WRONG RESULT" not in proc.stdout
    assert "device: cpu (" in proc.stdout  # the device named
    assert ("swin preset" in proc.stdout) == (model == "swin")
