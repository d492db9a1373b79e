"""ruff is clean on the whole repository (lint and format), so CI enforces the style."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _ruff(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True
    )


def test_ruff_check_is_clean() -> None:
    result = _ruff("check", "vitviz", "tests", "benchmarks", "packaging")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_is_clean() -> None:
    result = _ruff("format", "--check", "vitviz", "tests", "benchmarks", "packaging")
    assert result.returncode == 0, result.stdout + result.stderr
