"""benchmarks/train_throughput.py runs at --quick sizes and prints its table; no timing asserts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from script_main import run_script

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def run_benchmark(capfd: pytest.CaptureFixture[str], *flags: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of train_throughput.py run as ``__main__`` in this process
    (its timed loops still run in children of their own)."""
    # --compile with the "eager" backend: the compiled path's plumbing without a C++ build
    return run_script(
        BENCHMARKS / "train_throughput.py", "--quick", "--no-check", *flags,
        capfd=capfd, env={"VITVIZ_COMPILE_BACKEND": "eager"},
    )  # fmt: skip


def run_in_a_child(*flags: str) -> tuple[int, str, str]:
    """The same in a Python of its own: --ops runs the loops in the script's process (a
    DataLoader's forked workers and a compiled step kept out of the test's process)."""
    env = {**os.environ, "PYTHONWARNINGS": "error", "VITVIZ_COMPILE_BACKEND": "eager"}
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / "train_throughput.py"), "--quick", "--no-check",
         *flags],
        cwd=BENCHMARKS.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )  # fmt: skip
    return proc.returncode, proc.stdout, proc.stderr


def table(stdout: str) -> list[list[str]]:
    rows = [line for line in stdout.splitlines() if line.startswith("| (")]
    return [[c.strip() for c in row.strip("|").split("|")] for row in rows]


@pytest.mark.parametrize(
    "model, compile_flags", [("vit", ["--compile"]), ("swin", [])], ids=["vit", "swin"]
)
def test_train_throughput_quick(model: str, compile_flags: list[str], capfd) -> None:
    # 1 warm-up step (compiling falls in it) and 1 timed one: the table's plumbing, not a speed
    flags = ["--steps", "2", "--warmup", "1", "--model", model, *compile_flags]
    code, out, err = run_benchmark(capfd, *flags)
    assert code == 0, f"{out}\n{err}"
    cells = table(out)
    assert len(cells) == 2, out
    assert cells[0][0].startswith("(a) tutorial") and cells[0][5] == "baseline"
    assert cells[1][0].startswith("(b) vitviz") and cells[1][5] == "≥ 2"  # the CPU's target
    # --compile alone is "on"; without it, "auto" compiles on CUDA only
    assert cells[1][0].endswith("torch.compile" if compile_flags else "eager")
    for row in cells:
        assert float(row[1].replace(",", "")) > 0  # images per second
        assert row[3].endswith("MiB")  # peak RSS
    assert "WRONG RESULT" not in out
    assert "device: cpu (" in out  # the device named
    assert ("swin preset" in out) == (model == "swin")


def test_train_throughput_ops_table() -> None:
    # counts are per step
    code, out, err = run_in_a_child("--ops", "--compile", "on", "--steps", "1")
    assert code == 0, f"{out}\n{err}"
    assert "# Host work per training step" in out and "device: cpu (" in out
    cells = table(out)
    assert [row[0][:3] for row in cells] == ["(a)", "(b)", "(c)"], out
    assert cells[2][0].endswith("torch.compile")
    for row in cells:
        assert float(row[1]) > 100  # a forward and backward pass of 4 blocks at least
        assert row[3] == row[4] == "–"  # no device to wait for on the CPU, no GPU kernels
    assert cells[0][2] == "1.00"
