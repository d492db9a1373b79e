"""benchmarks/fuzz.py runs at --quick size (a round-robin of the CI subset in child processes)
and prints its table; whether the cases are clean is tests/project/test_fuzz.py's job."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from script_main import run_script

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def test_fuzz_benchmark_quick_with_two_seeds(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """--seeds 2 without --seed: two consecutive seeds from a random start, printed, each with
    its 10 cases (one child each), its row and its outcomes."""
    outcomes = tmp_path / "outcomes.json"
    args = ["--quick", "--no-check", "--cases", "10", "--seeds", "2", "--batch-size", "10"]
    code, out, err = run_script(
        BENCHMARKS / "fuzz.py", *args, "--json", str(outcomes), capfd=capfd
    )  # in this process; each case still in a child of its own
    assert code == 0, f"fuzz.py exited {code}\n{out}\n{err}"
    header = next(line for line in out.splitlines() if line.startswith("# fuzz: 20 "))
    first, second = (int(s) for s in header.split("(seeds ")[1].split(",")[:2])
    assert second == first + 1 and first != 0, header
    rows = {
        line.split("|")[1].strip(): [c.strip() for c in line.strip("|").split("|")]
        for line in out.splitlines()
        if line.startswith("| ") and not line.startswith("| inputs")
    }
    assert set(rows) == {"images", "checkpoints", "all", f"seed {first}", f"seed {second}"}, out
    assert rows["all"][1] == "20", out  # every case has an outcome
    assert rows[f"seed {first}"][1] == rows[f"seed {second}"][1] == "10", out
    assert int(rows["images"][1]) + int(rows["checkpoints"][1]) == 20
    assert "WRONG RESULT" not in out
    assert "peak RSS of a child" in out
    seeds = [r["seed"] for r in json.loads(outcomes.read_text())]
    assert sorted(seeds) == [first] * 10 + [second] * 10
