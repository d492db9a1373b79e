"""benchmarks/load.py runs at --quick sizes, prints its table and finds the logits equal."""

from __future__ import annotations

from pathlib import Path

import pytest
from script_main import run_script

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def test_load_benchmark_quick(capfd: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_script(BENCHMARKS / "load.py", "--quick", "--no-check", capfd=capfd)
    assert code == 0, f"load.py exited {code}\n{out}\n{err}"
    rows = [line for line in out.splitlines() if line.startswith("| .")]
    assert len(rows) == 4, out  # .pth and .safetensors, baseline and vitviz
    assert "WRONG RESULT" not in out
    assert "peak RSS" in out
