"""benchmarks/fuzz.py runs at --quick size (a round-robin of the CI subset in child processes)
and prints its table; whether the cases are clean is tests/test_fuzz.py's job."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def test_fuzz_benchmark_quick(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONWARNINGS": "error"}
    outcomes = tmp_path / "outcomes.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(BENCHMARKS / "fuzz.py"),
            "--quick",
            "--no-check",
            "--cases",
            "20",
            "--batch-size",
            "10",
            "--json",
            str(outcomes),
        ],
        cwd=BENCHMARKS.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    out = proc.stdout
    assert proc.returncode == 0, f"fuzz.py exited {proc.returncode}\n{out}\n{proc.stderr}"
    rows = {
        line.split("|")[1].strip(): [c.strip() for c in line.strip("|").split("|")]
        for line in out.splitlines()
        if line.startswith("| ") and not line.startswith("| inputs")
    }
    assert set(rows) == {"images", "checkpoints", "all"}, out
    assert rows["all"][1] == "20", out  # every case has an outcome (two children of 10)
    assert int(rows["images"][1]) + int(rows["checkpoints"][1]) == 20
    assert "WRONG RESULT" not in out
    assert "peak RSS of a child" in out
    assert outcomes.is_file()
