"""benchmarks/load.py runs at --quick sizes, prints its table and finds the logits equal."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def test_load_benchmark_quick() -> None:
    env = {**os.environ, "PYTHONWARNINGS": "error"}
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / "load.py"), "--quick", "--no-check"],
        cwd=BENCHMARKS.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    out = proc.stdout
    assert proc.returncode == 0, f"load.py exited {proc.returncode}\n{out}\n{proc.stderr}"
    rows = [line for line in out.splitlines() if line.startswith("| .")]
    assert len(rows) == 4, out  # .pth and .safetensors, baseline and vitviz
    assert "WRONG RESULT" not in out
    assert "peak RSS" in out
