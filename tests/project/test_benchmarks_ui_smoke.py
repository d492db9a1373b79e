"""The UI benchmarks run at --quick sizes and print their tables; no timing is asserted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from script_main import run_script

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def run_quick(script: str, tmp_path: Path) -> str:
    env = {
        **os.environ,
        "PYTHONWARNINGS": "error",
        "QT_QPA_PLATFORM": "offscreen",
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
    }
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), "--quick", "--no-check"],
        cwd=BENCHMARKS.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0, f"{script} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.stdout


def first_cells(out: str) -> list[str]:
    lines = [line for line in out.splitlines() if line.startswith("|")]
    assert len(lines) >= 3, f"no table printed:\n{out}"
    return [line.strip("|").split("|")[0].strip() for line in lines[2:]]


def test_ui_latency_quick(tmp_path: Path) -> None:
    out = run_quick("ui_latency.py", tmp_path)
    rows = first_cells(out)
    assert rows[0].startswith("baseline")
    assert any(r.startswith("head") for r in rows)
    assert any(r.startswith("layer") for r in rows)
    assert any(r.startswith("query") for r in rows)
    assert "features baseline: repaint, no change" in rows
    assert any(r.startswith("features: similarity query") for r in rows)
    assert "compare baseline: repaint, no change" in rows
    assert any(r.startswith("compare: synced query") for r in rows)


def test_startup_quick(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """startup.py's own process only spawns and reads its runs: it runs in this one (each run
    of the app and of the baseline is still a fresh Python)."""
    env = {"QT_QPA_PLATFORM": "offscreen", "XDG_CONFIG_HOME": str(tmp_path / "config")}
    code, out, err = run_script(
        BENCHMARKS / "startup.py", "--quick", "--no-check", capfd=capfd, env=env
    )
    assert code == 0, f"startup.py exited {code}\n{out}\n{err}"
    assert "Traceback" not in err, err
    rows = first_cells(out)
    assert rows[0].startswith("baseline")
    assert "vitviz: first paint" in rows
    assert "vitviz: first prediction shown" in rows
    assert "WRONG RESULT" not in out  # e.g. torch imported before the first paint
