"""vitviz-cli: the headless twin of the window (explain, info, convert, verify, train, methods,
families, faithfulness, stats, ablate, patch, compare): the parser of every sub-command and
``main``.

Exit status: 0 all done; 1 some inputs failed (the others were still written); 2 nothing could
be done (bad arguments, unreadable checkpoint, no device).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from vitviz.cli import (
    ablate,
    compare,
    convert,
    explain,
    faithfulness,
    families,
    info,
    methods,
    patch,
    stats,
    verify,
)
from vitviz.cli.common import EXIT_FAILED, CliError
from vitviz.core.console import say
from vitviz.core.errors import VitvizError
from vitviz.training import command as train


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vitviz-cli", description="Look inside Vision Transformers, headless."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    commands = (explain, info, convert, verify, train, methods, families, faithfulness, stats)
    for command in (*commands, ablate, patch, compare):
        command.add_parser(sub)  # each sub-command's module adds its sub-parser, in this order
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (CliError, VitvizError) as exc:  # a user's input that can't be used: one line
        say(f"vitviz-cli: {exc}")
        return EXIT_FAILED
    except KeyboardInterrupt:
        say("vitviz-cli: interrupted")
        return 130
    except BrokenPipeError:  # e.g. `vitviz-cli info … | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED
