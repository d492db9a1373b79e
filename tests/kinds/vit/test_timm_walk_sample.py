"""A sample of timm's ViT-family names per run (seed printed): each exact or refused, none opened
wrong. The full walk is benchmarks/timm_walk.py."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[3] / "benchmarks"


def test_a_sample_of_timm_names_is_exact_or_refused(tmp_path: Path) -> None:
    seed = int(os.environ.get("VITVIZ_WALK_SEED", random.randrange(10_000)))
    print(f"timm walk sample seed {seed} (VITVIZ_WALK_SEED={seed} repeats it)")
    env = {**os.environ, "VITVIZ_CACHE_DIR": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    env.pop("VITVIZ_NO_LIBRARY_CHECK", None)
    args = ["--sample", "3", "--seed", str(seed), "--max-params", "25e6", "--budget", "60"]
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / "timm_walk.py"), *args],
        cwd=BENCHMARKS.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    out = proc.stdout
    assert "OPEN-AND-WRONG: 0" in out, f"seed {seed}\n{out}\n{proc.stderr}"
    assert proc.returncode == 0, f"seed {seed}: exit {proc.returncode}\n{out}\n{proc.stderr}"
    rows = [line.split() for line in out.splitlines() if not line.startswith("|")]
    verdicts = [row[2] for row in rows if len(row) > 2 and row[1] in ("bare", "folder")]
    assert len(verdicts) >= 2 and set(verdicts) <= {"exact", "refused", "not"}, out
