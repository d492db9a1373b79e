"""A sample of timm's ViT-family names per run (seed printed): each exact or refused, none opened
wrong. The full walk is benchmarks/timm_walk.py."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from script_main import run_script

BENCHMARKS = Path(__file__).resolve().parents[3] / "benchmarks"


def test_a_sample_of_timm_names_is_exact_or_refused(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    seed = int(os.environ.get("VITVIZ_WALK_SEED", random.randrange(10_000)))
    print(f"timm walk sample seed {seed} (VITVIZ_WALK_SEED={seed} repeats it)")
    args = ["--sample", "3", "--seed", str(seed), "--max-params", "25e6", "--budget", "60"]
    code, out, err = run_script(
        BENCHMARKS / "timm_walk.py",
        *args,
        capfd=capfd,
        env={"VITVIZ_CACHE_DIR": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"},
        unset=("VITVIZ_NO_LIBRARY_CHECK",),
    )  # in this process: no interpreter, torch and timm of its own to start
    assert "OPEN-AND-WRONG: 0" in out, f"seed {seed}\n{out}\n{err}"
    assert code == 0, f"seed {seed}: exit {code}\n{out}\n{err}"
    rows = [line.split() for line in out.splitlines() if not line.startswith("|")]
    verdicts = [row[2] for row in rows if len(row) > 2 and row[1] in ("bare", "folder")]
    assert len(verdicts) >= 2 and set(verdicts) <= {"exact", "exact-float64", "refused", "not"}, out


def test_the_walk_tells_float32_rounding_from_a_wrong_model() -> None:
    """The walk's float64 reading (``float64_error``): the same function computed in another
    order is ~0 in float64; a model that computes otherwise is not."""
    import importlib.util

    import torch

    spec = importlib.util.spec_from_file_location("timm_walk", BENCHMARKS / "timm_walk.py")
    walk = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(walk)
    torch.manual_seed(0)
    library = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 3))
    same = torch.nn.Sequential(*[m for m in library])  # the same weights, another module
    x = torch.randn(2, 8)
    assert walk.float64_error(same, library, x) <= walk.FLOAT64_RTOL
    other = torch.nn.Sequential(library[0], torch.nn.ReLU(), library[2])  # GELU -> ReLU
    assert walk.float64_error(other, library, x) > 1e-3
