"""benchmarks/big_image.py runs at --quick sizes: its table, 4096-px overlays, no wrong result."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def test_big_image_benchmark_quick() -> None:
    env = {**os.environ, "PYTHONWARNINGS": "error"}
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / "big_image.py"), "--quick", "--no-check"],
        cwd=BENCHMARKS.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    out = proc.stdout
    assert proc.returncode == 0, f"big_image.py exited {proc.returncode}\n{out}\n{proc.stderr}"
    rows = {
        cells[0]: cells
        for cells in ([c.strip() for c in line.strip("|").split("|")] for line in out.splitlines())
        if cells[0] in ("baseline --full-size", "vitviz")
    }
    assert rows["baseline --full-size"][4] == "4800×1600"  # the full size
    assert rows["vitviz"][4] == "4096×1365"  # at most 4096 px long
    assert float(rows["vitviz"][3]) > 0  # a peak RSS was measured
    assert "WRONG RESULT" not in out
