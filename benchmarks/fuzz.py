"""Hostile images and checkpoints, thousands of them: does every one end cleanly?

The same seeded generators as tests/project/test_fuzz.py (tests/hostile_files.py), with more rounds
of their random variants (truncation points, flipped bits, sidecar mixes, poisoned weights, ...)
and the heavy cases the CI subset leaves out (80 MP photographs). Each case goes through vitviz's
Python API (load_image / load_checkpoint, analyze) and CLI (explain; info) as in
tests/fuzz_harness.py, in child processes of ``--batch-size`` cases each: a case that hangs past
``--case-timeout`` or kills its child is recorded (hang / crash) and the run goes on with the next
case in a new child. Peak RSS: the largest child's (getrusage of the children) and the largest
growth within one case (VmHWM).

The table: cases, accepted, clean refusals, raw tracebacks and crashes, hangs, files created,
programs started, opened wrong (a newer kind's checkpoint that opened but does not run as the
library's own model holding its tensors, tests/hostile_kinds.py), other problems (wrong verdicts,
unclear messages, exit codes, NaN results, memory), peak RSS; one row more for each newer kind's
seed (``kind-volo``, ...; ``--only kind-`` runs just those). Failing cases follow, grouped by
their first problem. Exit 1 when any case is not clean
(``--no-check`` only reports); a case the harness itself could not write is a wrong result.

Seeds: the random variants come from ``--seed`` (default 0, as CI's subset in
tests/project/test_fuzz.py, which stays fixed). ``--seeds N`` runs ``--cases`` cases for each of N
seeds in one run: S, S+1, ..., S+N-1 from ``--seed S``, or from a fresh random S when no ``--seed``
is given (new inputs every run); the seeds are printed, a failing case is named with its seed, and
``--seed S --only NAME`` runs that case again. After any change to loading or decoding, run it with
new seeds: a fixed seed only ever finds what it found once.

    .venv/bin/python benchmarks/fuzz.py [--cases N] [--seed S] [--seeds N] [--quick]
        [--no-check] [--batch-size B] [--case-timeout SECONDS] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

from _common import REPO_ROOT, Check, environment, finish, parser, peak_rss_mib, print_table

TESTS = REPO_ROOT / "tests"
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

DEFAULT_CASES = 3000
QUICK_CASES = 40
HEAVY_TIMEOUT_FACTOR = 4  # heavy cases (80 MP images) get this many case timeouts


def select_cases(seed: int, count: int, quick: bool, only: list[str] | None) -> list[Any]:
    """The run's cases: --quick a round-robin of the CI subset, else every generator's rounds;
    ``only``: just the cases whose name holds one of these strings (from the full list)."""
    from hostile_files import all_cases, ci_cases, round_robin

    if only:
        return [c for c in all_cases(seed, count) if any(s in c.name for s in only)]
    if quick:
        return round_robin(ci_cases(seed), count)
    return all_cases(seed, count)


# --------------------------------------------------------------------------- the child


def child(args: argparse.Namespace) -> int:
    """Run cases [start, stop): a line ``start K`` before each and ``done {json}`` after."""
    from fuzz_harness import FuzzEnv, run_case

    root, (start, stop) = args.child, args.range
    cases = select_cases(args.seed, args.cases, args.quick, args.only)
    env = FuzzEnv.open(root / "env")
    with env.activated():
        for k in range(start, min(stop, len(cases))):
            case = cases[k]
            print(f"start {k}", flush=True)
            folder = root / "cases" / str(k)
            try:
                outcome = run_case(case, folder, env, batch=k % 10 == 0).to_dict()
            except Exception as exc:  # noqa: BLE001 - the harness's own failure, reported
                where = "".join(traceback.format_exception_only(type(exc), exc)).strip()
                outcome = {
                    "name": case.name,
                    "kind": case.kind,
                    "expect": case.expect,
                    "verdict": "refused",
                    "problems": [f"harness: {where}"],
                    "messages": [],
                    "seconds": 0.0,
                    "peak_growth_mib": 0.0,
                    "peak_rss_mib": 0.0,
                }
            shutil.rmtree(folder, ignore_errors=True)
            print("done " + json.dumps(outcome), flush=True)
    return 0


# --------------------------------------------------------------------------- the parent


def _synthetic(case: Any, problem: str, seconds: float) -> dict[str, Any]:
    return {
        "name": case.name,
        "kind": case.kind,
        "expect": case.expect,
        "verdict": "refused",
        "problems": [problem],
        "messages": [],
        "seconds": seconds,
        "peak_growth_mib": 0.0,
        "peak_rss_mib": 0.0,  # unknown: the child died or was killed
    }


def run_all(
    args: argparse.Namespace, seed: int, cases: list[Any], root: Path
) -> list[dict[str, Any]]:
    """Every case of ``seed`` in children of --batch-size cases; hangs and crashes recorded, the
    run goes on. Each outcome says its seed."""
    results: list[dict[str, Any]] = []
    env = {**os.environ, "TMPDIR": str(root / "env" / "temp")}
    next_case = 0
    while next_case < len(cases):
        stop = min(len(cases), next_case + args.batch_size)
        command = [
            sys.executable,
            __file__,
            "--child",
            str(root),
            "--seed",
            str(seed),
            "--cases",
            str(args.cases),
            "--range",
            str(next_case),
            str(stop),
        ]
        command += ["--quick"] if args.quick else []
        for only in args.only or []:
            command += ["--only", only]
        proc = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,  # its own process group: a hang is killed with its children
        )
        next_case = _follow(proc, cases, next_case, stop, args.case_timeout, results)
    for r in results:
        r["seed"] = seed
    return results


def _follow(
    proc: subprocess.Popen,
    cases: list[Any],
    first: int,
    stop: int,
    timeout: float,
    results: list[dict[str, Any]],
) -> int:
    """Read one child's lines until it ends; returns the next case to run."""
    assert proc.stdout is not None and proc.stderr is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    current: int | None = None
    started = time.monotonic()
    buffer = b""
    next_case = first
    while True:
        limit = timeout * (
            HEAVY_TIMEOUT_FACTOR if current is not None and cases[current].heavy else 1
        )
        wait = max(0.0, started + limit - time.monotonic()) if current is not None else 600.0
        ready = sel.select(timeout=wait)
        if not ready:  # the current case ran past its limit
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            assert current is not None
            results.append(_synthetic(cases[current], f"hang: no end after {limit:.0f} s", limit))
            next_case = current + 1
            break
        chunk = os.read(proc.stdout.fileno(), 1 << 16)
        if not chunk:  # the child ended
            proc.wait()
            if current is not None:
                err = proc.stderr.read().decode(errors="replace").strip().splitlines()
                tail = err[-1] if err else ""
                how = (
                    f"signal {-proc.returncode}"
                    if proc.returncode < 0
                    else f"exit {proc.returncode}"
                )
                results.append(
                    _synthetic(
                        cases[current], f"crash: the process ended ({how}) {tail[:160]}", 0.0
                    )
                )
                next_case = current + 1
            elif next_case < stop:  # died before its first case: report and skip the batch
                err = proc.stderr.read().decode(errors="replace").strip()
                raise RuntimeError(f"a fuzz child failed to start (exit {proc.returncode}):\n{err}")
            break
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for raw in lines:
            line = raw.decode(errors="replace")
            if line.startswith("start "):
                current = int(line.split()[1])
                started = time.monotonic()
            elif line.startswith("done "):
                results.append(json.loads(line[5:]))
                next_case = (current if current is not None else next_case) + 1
                current = None
    sel.close()
    proc.stdout.close()
    proc.stderr.close()
    return next_case


# --------------------------------------------------------------------------- the report

COLUMNS = [
    "cases",
    "accepted",
    "clean refusals",
    "raw tracebacks / crashes",
    "hangs",
    "files created",
    "programs started",
    "opened wrong",
    "other problems",
    "peak RSS MiB",
    "max growth in a case MiB",
]


def _row(label: str, results: list[dict[str, Any]]) -> list[str]:
    cats = [{p.split(":", 1)[0] for p in r["problems"]} for r in results]
    clean = [not c for c in cats]
    accepted = sum(
        1 for r, ok in zip(results, clean, strict=True) if ok and r["verdict"] == "accepted"
    )
    refusals = sum(
        1 for r, ok in zip(results, clean, strict=True) if ok and r["verdict"] == "refused"
    )
    raw = sum(1 for c in cats if c & {"raw", "crash"})
    others = {"verdict", "message", "exit", "nonfinite", "memory", "harness"}
    growth = max((r["peak_growth_mib"] for r in results), default=0.0)
    peak = max((r["peak_rss_mib"] for r in results), default=0.0)
    return [
        label,
        str(len(results)),
        str(accepted),
        str(refusals),
        str(raw),
        str(sum(1 for c in cats if "hang" in c)),
        str(sum(1 for c in cats if "file" in c)),
        str(sum(1 for c in cats if "program" in c)),
        str(sum(1 for c in cats if "exact" in c)),
        str(sum(1 for c in cats if c & others)),
        f"{peak:.0f}",
        f"{growth:.0f}",
    ]


def _cause(problem: str) -> str:
    """A grouping key for a problem: its category and the exception type or first words."""
    category, _, detail = problem.partition(": ")
    if category in ("raw", "memory"):
        parts = detail.split(": ")
        detail = next((p for p in parts[1:] if "." in p.split(" ")[0]), parts[-1])
        detail = detail.split(":")[0]
    elif category in ("file", "program"):
        detail = detail.split(" ")[0]
    else:
        detail = " ".join(detail.split()[:4])
    return f"{category}: {detail}"


def report_failures(results: list[dict[str, Any]], shown: int) -> None:
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in results:
        if r["problems"]:
            groups.setdefault(_cause(r["problems"][0]), []).append(r)
    if not groups:
        return
    print(f"\nfailing cases by cause ({sum(len(g) for g in groups.values())} cases):")
    for cause, members in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        print(f"\n- {cause} ({len(members)})")
        for r in members[:shown]:
            print(f"    seed {r.get('seed', '?')} {r['name']}: {r['problems'][0][:220]}")
        if len(members) > shown:
            print(f"    … and {len(members) - shown} more")


def run_seeds(seed: int | None, count: int) -> list[int]:
    """The run's seeds: ``seed``, ``seed + 1``, ...; with no ``seed``, 0 for one seed (CI's),
    else a random start (each run new inputs)."""
    if seed is None:
        seed = 0 if count == 1 else random.SystemRandom().randrange(1, 10**9)
    return [seed + i for i in range(count)]


def main() -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument(
        "--cases", type=int, default=None, help=f"cases to run (default {DEFAULT_CASES})"
    )
    p.add_argument("--seed", type=int, default=None, help="seed of the random variants (default 0)")
    p.add_argument(
        "--seeds",
        type=int,
        default=1,
        metavar="N",
        help="run --cases cases for each of N seeds: --seed, --seed+1, ... (no --seed: from a "
        "random one)",
    )
    p.add_argument("--batch-size", type=int, default=150, help="cases per child process")
    p.add_argument("--case-timeout", type=float, default=60.0, help="seconds before a hang")
    p.add_argument("--json", type=Path, help="write every case's outcome to this JSON file")
    p.add_argument("--show", type=int, default=8, help="failing cases listed per cause")
    p.add_argument(
        "--only",
        action="append",
        metavar="TEXT",
        help="run only the cases whose name holds TEXT (repeatable), e.g. --only pickle/",
    )
    p.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--range", type=int, nargs=2, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.cases is None:
        args.cases = QUICK_CASES if args.quick else DEFAULT_CASES
    if args.child:
        assert args.seed is not None
        return child(args)
    if args.seeds < 1:
        p.error("--seeds must be 1 or more")

    seeds = run_seeds(args.seed, args.seeds)
    by_seed = {seed: select_cases(seed, args.cases, args.quick, args.only) for seed in seeds}
    total = sum(len(c) for c in by_seed.values())
    print(
        f"# fuzz: {total} hostile images and checkpoints through vitviz's API and CLI "
        f"(seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}"
        f"{', --quick: the CI subset' if args.quick else ''})"
    )
    print(environment())
    start = time.perf_counter()
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="vitviz-fuzz-") as tmp:
        root = Path(tmp)
        from fuzz_harness import FuzzEnv

        FuzzEnv.create(root / "env", load=False)
        for seed, cases in by_seed.items():
            results += run_all(args, seed, cases, root)
    seconds = time.perf_counter() - start
    wrong = [
        f"seed {r['seed']} {r['name']}: {r['problems'][0]}"
        for r in results
        if any(p.startswith("harness:") for p in r["problems"])
    ]
    if len(results) != total:
        wrong.append(f"{len(results)} outcomes for {total} cases")
    images = [r for r in results if r["kind"] == "image"]
    ckpts = [r for r in results if r["kind"] == "checkpoint"]
    rows = [_row("images", images), _row("checkpoints", ckpts), _row("all", results)]
    # the newer kinds' seeds and their mutations (tests/hostile_kinds.py), one row a seed
    kinds = sorted({r["name"].split("/")[0] for r in results if r["name"].startswith("kind-")})
    rows += [_row(k, [r for r in results if r["name"].startswith(k + "/")]) for k in kinds]
    if len(seeds) > 1:
        rows += [_row(f"seed {s}", [r for r in results if r["seed"] == s]) for s in seeds]
    child_peak = max((r["peak_rss_mib"] for r in results), default=0.0)
    print(
        f"{len(results)} cases in {seconds:.0f} s; peak RSS of a child: {child_peak:.0f} MiB "
        f"(this process {peak_rss_mib():.0f} MiB)"
    )
    print_table(["inputs", *COLUMNS], rows)
    problems = Counter(c for r in results for c in {p.split(":", 1)[0] for p in r["problems"]})
    if problems:
        print(
            "cases with each kind of problem: "
            + ", ".join(f"{k} {v}" for k, v in problems.most_common())
        )
    report_failures(results, args.show)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
        print(f"\nevery outcome: {args.json}")
    unclean = sum(1 for r in results if r["problems"])
    return finish([Check("cases not clean", unclean, 0, at_most=True)], args.no_check, wrong)


if __name__ == "__main__":
    sys.exit(main())
