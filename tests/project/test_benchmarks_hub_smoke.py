"""benchmarks/hub_download.py runs at --quick sizes against the stand-in hub: three repositories
fetched (only the files vitviz reads), a cached id opened with no request, its table printed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def test_hub_download_benchmark_quick() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / "hub_download.py"), "--quick", "--no-check"],
        cwd=BENCHMARKS.parent,
        env={**os.environ},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    out = proc.stdout
    assert proc.returncode == 0, f"hub_download.py exited {proc.returncode}\n{out}\n{proc.stderr}"
    assert "WRONG RESULT" not in out
    rows = [line for line in out.splitlines() if line.startswith("| ") and "/" in line]
    assert len(rows) == 3, out
    assert all("model.safetensors" in r and "pytorch_model.bin" not in r for r in rows), out
    assert "load_checkpoint(id), cached" in out
