"""The walk compares each of vitviz's paths with the library's same path: the fused one with
timm's own forward (its fused attention), the capture one with timm's explicit attention. On an
EVA-02 whose tokens reach 400 the two orders of float32 rounding part by 1.4e-4 in timm itself;
vitviz's fused path is timm's to the bit, and was once reported wrong against timm's explicit
path. The full walk is benchmarks/timm_walk.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from script_main import run_script

BENCHMARKS = Path(__file__).resolve().parents[3] / "benchmarks"


@pytest.mark.slow
def test_eva02_fused_path_is_compared_with_timms_fused_forward(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # seed 1: timm's fused and explicit logits part by 1.4e-4 relative (over the 1e-4 limit)
    args = ["--patterns", "eva02_base_patch14_448", "--seed", "1"]
    code, out, err = run_script(
        BENCHMARKS / "timm_walk.py",
        *args,
        capfd=capfd,
        env={"VITVIZ_CACHE_DIR": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"},
        unset=("VITVIZ_NO_LIBRARY_CHECK",),
    )  # in this process: no interpreter, torch and timm of its own to start
    assert code == 0, f"exit {code}\n{out}\n{err}"
    rows = [line.split() for line in out.splitlines() if line.startswith("eva02_base_patch14_448")]
    assert [row[1:3] for row in rows] == [["bare", "exact"], ["folder", "exact"]], out
    for row in rows:  # logits / attention: timm's own rounding, well inside the limits
        logits, attention = float(row[3]), float(row[5])
        assert logits <= 1e-6 and attention <= 1e-6, out
