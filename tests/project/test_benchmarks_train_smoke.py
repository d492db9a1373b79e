"""benchmarks/train_throughput.py runs at --quick sizes and prints its table; no timing asserts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def run_benchmark(*flags: str) -> subprocess.CompletedProcess[str]:
    # --compile with the "eager" backend: the compiled path's plumbing without a C++ build
    env = {**os.environ, "PYTHONWARNINGS": "error", "VITVIZ_COMPILE_BACKEND": "eager"}
    return subprocess.run(
        [sys.executable, str(BENCHMARKS / "train_throughput.py"), "--quick", "--no-check",
         *flags],
        cwd=BENCHMARKS.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )  # fmt: skip


def table(stdout: str) -> list[list[str]]:
    rows = [line for line in stdout.splitlines() if line.startswith("| (")]
    return [[c.strip() for c in row.strip("|").split("|")] for row in rows]


@pytest.mark.parametrize(
    "model, compile_flags", [("vit", ["--compile"]), ("swin", [])], ids=["vit", "swin"]
)
def test_train_throughput_quick(model: str, compile_flags: list[str]) -> None:
    # 1 warm-up step (compiling falls in it) and 1 timed one: the table's plumbing, not a speed
    proc = run_benchmark("--steps", "2", "--warmup", "1", "--model", model, *compile_flags)
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    cells = table(proc.stdout)
    assert len(cells) == 2, proc.stdout
    assert cells[0][0].startswith("(a) tutorial") and cells[0][5] == "baseline"
    assert cells[1][0].startswith("(b) vitviz") and cells[1][5] == "≥ 2"  # the CPU's target
    # --compile alone is "on"; without it, "auto" compiles on CUDA only
    assert cells[1][0].endswith("torch.compile" if compile_flags else "eager")
    for row in cells:
        assert float(row[1].replace(",", "")) > 0  # images per second
        assert row[3].endswith("MiB")  # peak RSS
    assert "WRONG RESULT" not in proc.stdout
    assert "device: cpu (" in proc.stdout  # the device named
    assert ("swin preset" in proc.stdout) == (model == "swin")


def test_train_throughput_ops_table() -> None:
    proc = run_benchmark("--ops", "--compile", "on", "--steps", "1")  # counts are per step
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    assert "# Host work per training step" in proc.stdout and "device: cpu (" in proc.stdout
    cells = table(proc.stdout)
    assert [row[0][:3] for row in cells] == ["(a)", "(b)", "(c)"], proc.stdout
    assert cells[2][0].endswith("torch.compile")
    for row in cells:
        assert float(row[1]) > 100  # a forward and backward pass of 4 blocks at least
        assert row[3] == row[4] == "–"  # no device to wait for on the CPU, no GPU kernels
    assert cells[0][2] == "1.00"
