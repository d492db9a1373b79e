"""benchmarks/hub_download.py runs at --quick sizes against the stand-in hub: three repositories
fetched (only the files vitviz reads), a cached id opened with no request, its table printed."""

from __future__ import annotations

from pathlib import Path

import pytest
from script_main import run_script

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def test_hub_download_benchmark_quick(capfd: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_script(
        BENCHMARKS / "hub_download.py", "--quick", "--no-check", capfd=capfd
    )
    assert code == 0, f"hub_download.py exited {code}\n{out}\n{err}"
    assert "WRONG RESULT" not in out
    rows = [line for line in out.splitlines() if line.startswith("| ") and "/" in line]
    assert len(rows) == 3, out
    assert all("model.safetensors" in r and "pytorch_model.bin" not in r for r in rows), out
    assert "load_checkpoint(id), cached" in out
