"""``vitviz-cli verify CKPT...``: run the library check of each checkpoint now (not from the
cache) and print a table: library, architecture, logits and attention errors, verdict."""

from __future__ import annotations

import argparse
from pathlib import Path

from vitviz.cli.common import (
    ASSUMPTION_PREFIXES,
    EXIT_FAILED,
    EXIT_OK,
    CliError,
    SubParsers,
    add_arch_options,
    load,
)
from vitviz.cli.shared_options import add_config_option
from vitviz.core.console import say


def add_parser(sub: SubParsers) -> None:
    p = sub.add_parser(
        "verify",
        help="compare vitviz's reading of checkpoints with the library that made them",
    )
    p.add_argument("checkpoints", nargs="+", type=Path, help="checkpoint files or model folders")
    add_config_option(p)
    add_arch_options(p)
    p.set_defaults(func=cmd_verify)


def _number(value: float | None) -> str:
    return "—" if value is None else f"{value:.1e}"


def cmd_verify(args: argparse.Namespace) -> int:
    from vitviz.checkpoints.library_check import ATTENTION_ATOL, LOGITS_RTOL, checked
    from vitviz.checkpoints.probe_sizes import analysed_sizes

    rows = [("checkpoint", "library", "architecture", "logits", "attention", "verdict")]
    failed = False
    for path in args.checkpoints:
        try:
            loaded = load(path, args.config, args)
        except CliError as exc:
            rows.append((path.name, "—", "—", "—", "—", f"refused: {exc}"))
            failed = True
            continue
        assumed = [n for n in loaded.notes if n.startswith(ASSUMPTION_PREFIXES)]
        for note in assumed:  # what the check shares with vitviz's reading, it can't check
            say(f"vitviz-cli: {path.name}: {note}")
        result = None
        if loaded.reference is not None:
            stride = loaded.kind.input_stride(loaded.model)
            sizes = analysed_sizes(loaded.preprocessing, stride)
            result = checked(
                loaded.model, path, loaded.reference, force=True, kind=loaded.kind, sizes=sizes
            )
        if result is None:
            why = "no library architecture named" if loaded.reference is None else "not importable"
            rows.append((path.name, "—", "—", "—", "—", f"not checked ({why})"))
            continue
        verdict = "exact" if result.ok else "DIFFERS"
        if result.ok and not result.within_float32 and result.problem is None:
            verdict = f"exact in float64 ({result.float64_words()})"  # float32's rounding
        if result.ok and assumed:
            verdict += f", on {len(assumed)} assumption{'s' if len(assumed) > 1 else ''}"
        if result.problem is not None:
            verdict = f"{'refused' if result.unfit else 'not checked'} ({result.problem})"
        if result.cannot_run_at is not None:  # vitviz's model can't run at a size analysed
            h, w = result.cannot_run_at
            verdict = f"refused (vitviz's model can't run at {h}×{w}: {result.cannot_run})"
        failed = failed or not result.ok
        rows.append(
            (
                path.name,
                result.library,
                result.arch,
                _number(result.logits),
                _number(result.attention),
                verdict,
            )
        )
    widths = [max(len(r[i]) for r in rows[:]) for i in range(5)]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row[:5], widths, strict=True)) + "  " + row[5])
    say(f"limits: logits {LOGITS_RTOL:g} relative, attention {ATTENTION_ATOL:g}")
    return EXIT_FAILED if failed else EXIT_OK
