"""benchmarks/big_image.py runs at --quick sizes: its table, 4096-px overlays, no wrong result."""

from __future__ import annotations

from pathlib import Path

import pytest
from script_main import run_script

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def test_big_image_benchmark_quick(capfd: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_script(BENCHMARKS / "big_image.py", "--quick", "--no-check", capfd=capfd)
    assert code == 0, f"big_image.py exited {code}\n{out}\n{err}"
    rows = {
        cells[0]: cells
        for cells in ([c.strip() for c in line.strip("|").split("|")] for line in out.splitlines())
        if cells[0] in ("baseline --full-size", "vitviz")
    }
    assert rows["baseline --full-size"][4] == "4800×1600"  # the full size
    assert rows["vitviz"][4] == "4096×1365"  # at most 4096 px long
    assert float(rows["vitviz"][3]) > 0  # a peak RSS was measured
    assert "WRONG RESULT" not in out
