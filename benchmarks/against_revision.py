"""One benchmark on this checkout and on another git revision, side by side: medians and new/old.

The revision is checked out into a temporary git worktree (removed afterwards). The benchmark runs
``--runs`` times on each side, the sides taking turns (old, new, old, new, ...) so that a busy
machine weighs on both alike; every run is its own process, started in its checkout with
``PYTHONPATH`` set to it. Each side runs its own copy of the script (what that revision
measures); where the revision lacks the script, or with ``--same-script``, this checkout's
``benchmarks/`` files are copied over the old ones first.

Every run's tables (``print_table``'s markdown rows in ``benchmarks/_common.py``) are read; a row
is known by its first cell (a repeated first cell gets " #2", ...), a column by its header. Each
numeric cell (``12.3 ms``, ``1.2 s``, ``512 MiB``, ``0.91``, ``3×``, ``42``) is taken in a common
unit, its median over a side's runs printed in the unit of that side's first run, with new/old.
Targets (``≤ 1.5``) and words are left out. A measuring tool: it exits 0 whatever the runs say
(their exit codes are reported).

    .venv/bin/python benchmarks/against_revision.py 81810f2 benchmarks/analysis_overhead.py --quick
    .venv/bin/python benchmarks/against_revision.py --runs 5 main~3 benchmarks/startup.py --quick
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

from _common import REPO_ROOT, print_table

# unit -> (dimension, scale to the dimension's base unit)
UNITS: dict[str, tuple[str, float]] = {
    "ns": ("s", 1e-9),
    "µs": ("s", 1e-6),
    "us": ("s", 1e-6),
    "ms": ("s", 1e-3),
    "s": ("s", 1.0),
    "min": ("s", 60.0),
    "B": ("B", 1.0),
    "KiB": ("B", 1024.0),
    "MiB": ("B", 1024.0**2),
    "GiB": ("B", 1024.0**3),
    "KB": ("B", 1e3),
    "MB": ("B", 1e6),
    "GB": ("B", 1e9),
}
NUMBER = re.compile(r"^(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*(\S*)$")
SEPARATOR = re.compile(r"^\|[-:| ]+\|$")

Cell = tuple[float, str]  # value in the dimension's base unit, the unit as printed
Table = dict[tuple[str, str], Cell]  # (row, column) -> cell


def parse_cell(text: str) -> Cell | None:
    """``'12.3 ms'`` -> (0.0123, 'ms'); ``'0.91'`` -> (0.91, ''); a target or a word -> None."""
    m = NUMBER.match(text.strip().replace(",", ""))
    if m is None:
        return None
    value, unit = float(m[1]), m[2]
    if unit in UNITS:
        return value * UNITS[unit][1], unit
    if unit in ("", "×", "x", "%"):
        return value, unit
    return None  # '3 of 4', '12 px': not a quantity this compares


def parse_tables(output: str) -> Table:
    """Every numeric cell of every markdown table in a benchmark's output."""
    cells: Table = {}
    seen: dict[str, int] = {}
    header: list[str] | None = None
    lines = output.splitlines()
    for i, line in enumerate(lines):
        line = line.strip()
        if not (line.startswith("|") and line.endswith("|")):
            header = None
            continue
        if SEPARATOR.match(line):
            continue
        row = [c.strip() for c in line[1:-1].split("|")]
        following = lines[i + 1].strip() if i + 1 < len(lines) else ""
        if header is None and SEPARATOR.match(following):
            header = row
            continue
        if header is None or len(row) != len(header):
            continue
        name = row[0]
        seen[name] = seen.get(name, 0) + 1
        if seen[name] > 1:
            name = f"{name} #{seen[name]}"
        for column, text in zip(header[1:], row[1:], strict=True):
            cell = parse_cell(text)
            if cell is not None:
                cells[(name, column)] = cell
    return cells


def show(value: float, unit: str) -> str:
    """A value in the base unit, printed in ``unit``."""
    number = value / UNITS[unit][1] if unit in UNITS else value
    text = f"{number:.4g}"
    return f"{text} {unit}" if unit in UNITS else f"{text}{unit}"


def compare(old_runs: Iterable[Table], new_runs: Iterable[Table]) -> list[tuple[str, ...]]:
    """Rows of (row, column, old median, new median, new/old), in the order first seen."""
    old_runs, new_runs = list(old_runs), list(new_runs)
    keys: dict[tuple[str, str], None] = {}
    for table in [*new_runs, *old_runs]:
        keys.update(dict.fromkeys(table))
    rows = []
    for key in keys:
        old = [t[key] for t in old_runs if key in t]
        new = [t[key] for t in new_runs if key in t]
        old_m = statistics.median(v for v, _ in old) if old else None
        new_m = statistics.median(v for v, _ in new) if new else None
        ratio = "—"
        if old_m is not None and new_m is not None:
            ratio = f"{new_m / old_m:.2f}" if old_m else ("1.00" if new_m == 0 else "∞")
        rows.append(
            (
                key[0],
                key[1],
                "—" if old_m is None else show(old_m, old[0][1]),
                "—" if new_m is None else show(new_m, new[0][1]),
                ratio,
            )
        )
    return rows


# -- the runs ----------------------------------------------------------------------------------
def git(*args: str, cwd: Path = REPO_ROOT) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True
    ).stdout.strip()


def run_once(checkout: Path, script: str, args: list[str], timeout: float) -> tuple[int, str]:
    """(exit code, stdout) of one run of ``checkout/script`` with PYTHONPATH at the checkout."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    try:
        proc = subprocess.run(
            [sys.executable, str(checkout / script), *args],
            cwd=checkout,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return 124, ""
    if proc.returncode not in (0, 1):  # 1: a missed target, its table stands
        sys.stderr.write(proc.stderr[-2000:])
    return proc.returncode, proc.stdout


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3, help="runs of each side (default 3)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds one run may take")
    p.add_argument(
        "--same-script",
        action="store_true",
        help="run this checkout's benchmarks/ files on the revision too",
    )
    p.add_argument("revision", help="the old side: any git revision (commit, branch, tag)")
    p.add_argument("script", help="the benchmark, relative to the repository root")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the benchmark's own arguments")
    a = p.parse_args()
    script = Path(a.script)
    if script.is_absolute():
        script = script.relative_to(REPO_ROOT)
    if not (REPO_ROOT / script).is_file():
        print(f"{a.script}: no such benchmark in {REPO_ROOT}")
        return 0
    try:
        old_label = git("rev-parse", "--short", "--verify", a.revision + "^{commit}")
    except subprocess.CalledProcessError:
        print(f"{a.revision}: no such revision in {REPO_ROOT}")
        return 0
    new_label = git("rev-parse", "--short", "HEAD")
    if git("status", "--porcelain", "--untracked-files=no"):
        new_label += " + uncommitted changes"
    tmp = Path(tempfile.mkdtemp(prefix="against-revision-"))
    tree = tmp / old_label
    try:
        try:
            git("worktree", "add", "--detach", str(tree), old_label)
        except subprocess.CalledProcessError as exc:
            print(f"git worktree add {old_label} failed: {exc.stderr.strip()}")
            return 0
        note = "each side runs its own script"
        if a.same_script or not (tree / script).is_file():
            for f in (REPO_ROOT / "benchmarks").glob("*.py"):
                shutil.copy2(f, tree / "benchmarks" / f.name)
            note = "both sides run this checkout's benchmarks/ files"
        print(f"# {' '.join([str(script), *a.args])}: old {old_label}, new {new_label}")
        print(f"{a.runs} runs of each side in turns (old, new, ...); {note}")
        old_runs: list[Table] = []
        new_runs: list[Table] = []
        codes: dict[str, list[int]] = {"old": [], "new": []}
        for _ in range(a.runs):
            for side, checkout, runs in (("old", tree, old_runs), ("new", REPO_ROOT, new_runs)):
                code, out = run_once(checkout, str(script), a.args, a.timeout)
                codes[side].append(code)
                runs.append(parse_tables(out))
        print(f"exit codes: old {codes['old']}, new {codes['new']}")
        print()
        rows = compare(old_runs, new_runs)
        if rows:
            print_table(["row", "column", f"old {old_label}", "new", "new/old"], rows)
        else:
            print("no numeric table cells in the runs' output")
    finally:
        subprocess.run(
            ["git", "worktree", "remove", "--force", str(tree)],
            cwd=REPO_ROOT,
            capture_output=True,
            check=False,
        )
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
