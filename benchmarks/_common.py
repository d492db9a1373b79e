"""Shared helpers of the benchmarks: timing, statistics, the result table and the exit code.

Benchmarks are scripts, run from the repository root as ``python benchmarks/NAME.py``. Every
one measures its baseline in the same run, reports medians and ratios against a target, and
exits 1 when a target is missed (``--no-check`` only reports). Importing this module puts the
repository root first on ``sys.path``, so the working tree's ``vitviz`` is the one measured.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))


# -- arguments -------------------------------------------------------------------------------------
def parser(description: str) -> argparse.ArgumentParser:
    """An argument parser with the options every benchmark has."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument(
        "--quick",
        action="store_true",
        help="tiny sizes and few repeats: checks that the script runs, its timings mean nothing",
    )
    p.add_argument(
        "--no-check",
        action="store_true",
        help="only report: exit 0 even when a timing target is missed (a wrong result still fails)",
    )
    p.add_argument("--repeats", type=int, default=None, help="timed repeats of each measurement")
    p.add_argument("--warmup", type=int, default=None, help="untimed runs before timing")
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads (default: torch's choice); 1 keeps a busy machine from skewing",
    )
    return p


def add_device_option(p: argparse.ArgumentParser) -> None:
    """``--device cpu|cuda|mps`` (cuda:N too): where the benchmark runs (default cpu)."""
    p.add_argument(
        "--device", default="cpu", help="cpu | cuda | cuda:N | mps: where to run (default cpu)"
    )


def bench_device(name: str):  # -> torch.device
    """The torch.device of ``--device``; exits 2 with a plain message when it is not here."""
    from vitviz.core.devices import resolve_device

    try:
        return resolve_device(name)
    except ValueError as exc:
        print(f"--device {name}: {exc}", file=sys.stderr)
        raise SystemExit(2) from exc


def device_name(device) -> str:
    """The device in words, e.g. 'cuda:0 (NVIDIA H100 80GB HBM3)' or 'cpu (AMD EPYC …)'."""
    import torch

    dev = torch.device(device)
    if dev.type == "cuda":
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        return f"cuda:{index} ({torch.cuda.get_device_name(index)})"
    if dev.type == "mps":
        return "mps (Apple GPU)"
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next(
                (line.split(":", 1)[1].strip() for line in f if line.startswith("model name")),
                model,
            )
    except OSError:
        pass
    return f"cpu ({model})"


def synchronize(device) -> None:
    """Wait for the device's queued work (timings of GPU work need it; CPU: nothing)."""
    import torch

    dev = torch.device(device)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    elif dev.type == "mps":
        torch.mps.synchronize()


def synced(fn: Callable[[], object], device) -> Callable[[], object]:
    """``fn`` then ``synchronize(device)``: what a timing of device work must measure."""

    def run() -> object:
        out = fn()
        synchronize(device)
        return out

    return run


def apply_threads(threads: int | None) -> None:
    """torch.set_num_threads(threads) when given (before any timing)."""
    if threads:
        import torch

        torch.set_num_threads(threads)


def read_args(p: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """The parsed arguments, torch's CPU threads set from ``--threads`` (before any timing)."""
    args = p.parse_args(argv)
    apply_threads(args.threads)
    return args


def repeats_and_warmup(
    args: argparse.Namespace, quick: tuple[int, int], full: tuple[int, int]
) -> tuple[int, int]:
    """(timed repeats, warm-up turns): ``--repeats`` / ``--warmup`` where given, else the
    benchmark's (repeats, warmup) for ``--quick`` or for a full run."""
    repeats, warmup = quick if args.quick else full
    return args.repeats or repeats, args.warmup if args.warmup is not None else warmup


# -- timing ----------------------------------------------------------------------------------------
def time_once(fn: Callable[[], object]) -> float:
    """Seconds one call of ``fn`` takes (time.perf_counter)."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def interleaved(
    cases: dict[str, Callable[[], object]], repeats: int, warmup: int
) -> dict[str, list[float]]:
    """Time every case ``repeats`` times in turns (a, b, c, a, b, c, ...) after ``warmup`` turns.

    Taking turns spreads slow drift (other processes, clock changes, heat) over all cases
    alike, so it cancels in the ratios.
    """
    for _ in range(warmup):
        for fn in cases.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeats):
        for name, fn in cases.items():
            times[name].append(time_once(fn))
    return times


@dataclass
class Stats:
    """Summary of one case's timings, in seconds."""

    median: float
    p90: float
    min: float
    n: int

    @classmethod
    def of(cls, times: Sequence[float]) -> Stats:
        if not times:
            raise ValueError("no timings to summarise")
        ordered = sorted(times)
        # p90 by the nearest-rank method: the smallest value with ≥ 90 % of the runs at or below.
        rank = max(1, -(-9 * len(ordered) // 10))
        return cls(statistics.median(ordered), ordered[rank - 1], ordered[0], len(ordered))


# -- the table -------------------------------------------------------------------------------------
@dataclass
class Check:
    """A target on a ratio: ``ratio <= limit`` (at_most) or ``ratio >= limit`` (at least)."""

    name: str
    ratio: float
    limit: float
    at_most: bool

    @property
    def ok(self) -> bool:
        return self.ratio <= self.limit if self.at_most else self.ratio >= self.limit

    @property
    def target(self) -> str:
        return f"{'≤' if self.at_most else '≥'} {self.limit:g}"

    @property
    def verdict(self) -> str:
        return "ok" if self.ok else "MISSED"


def fmt_seconds(seconds: float) -> str:
    """Seconds in ms (or s above 10 s) with three significant digits or so."""
    if seconds >= 10:
        return f"{seconds:.1f} s"
    ms = seconds * 1e3
    if ms >= 100:
        return f"{ms:.0f} ms"
    if ms >= 10:
        return f"{ms:.1f} ms"
    return f"{ms:.2f} ms"


def timing_cells(label: str, stats: Stats) -> list[str]:
    """A timed case's first cells: its label, median, p90 and min."""
    return [label, fmt_seconds(stats.median), fmt_seconds(stats.p90), fmt_seconds(stats.min)]


def target_cells(check: Check | None, baseline: bool) -> list[str]:
    """A case's last cells: its target (``baseline`` or ``info`` when it has none) and verdict."""
    if check is not None:
        return [check.target, check.verdict]
    return ["baseline" if baseline else "info", ""]


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """A markdown table with aligned columns (text left, everything else right)."""
    widths = [len(h) for h in headers]
    for row in rows:
        if len(row) != len(headers):
            raise ValueError(f"row {row!r} has {len(row)} cells for {len(headers)} columns")
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]

    def line(cells: Sequence[str]) -> str:
        parts = [
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "| " + " | ".join(parts) + " |"

    print(line(headers))
    print(
        "|"
        + "|".join(("-" * (w + 1) + ":") if i else ("-" * (w + 2)) for i, w in enumerate(widths))
        + "|"
    )
    for row in rows:
        print(line(row))


# -- the environment -------------------------------------------------------------------------------
def print_timed_report(
    title: str,
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    repeats: int,
    warmup: int,
    quick: bool,
    device_line: str | None = None,
) -> None:
    """The usual report: a "# title" line, the device (when given), the environment, how the
    cases were timed, then the table."""
    print(f"# {title}")
    if device_line is not None:
        print(device_line)
    print(environment())
    print(
        f"{repeats} timed repeats of each case in turns, after {warmup} warm-up turns"
        + (" (--quick: timings are not meaningful)" if quick else "")
    )
    print()
    print_table(headers, rows)


def peak_rss_mib() -> float:
    """Peak resident memory of this process so far, MiB (getrusage; KiB on Linux, B on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def environment() -> str:
    """One line saying what ran the benchmark; the load average warns of a busy machine."""
    import torch

    load = ", ".join(f"{v:.2f}" for v in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    return (
        f"python {platform.python_version()}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, {os.cpu_count()} CPUs, "
        f"{platform.machine()}, load average {load}"
    )


def finish(checks: Sequence[Check], no_check: bool, wrong: Sequence[str] = ()) -> int:
    """Print the verdict and return the exit status: 1 for a wrong result or a missed target."""
    for message in wrong:
        print(f"WRONG RESULT: {message}")
    missed = [c for c in checks if not c.ok]
    for c in missed:
        print(f"TARGET MISSED: {c.name}: {c.ratio:.2f} (target {c.target})")
    if wrong:
        return 1
    if missed and not no_check:
        return 1
    if missed:
        print("(--no-check: reported only)")
    elif checks:
        print("all targets met")
    else:
        print("no timing targets at these sizes")
    return 0
