"""vitviz-cli: the headless twin of the window (explain, info, convert, verify, train, methods,
families, faithfulness, stats, ablate, patch, compare): the parser of every sub-command and
``main``.

Exit status: 0 all done; 1 some inputs failed (the others were still written); 2 nothing could
be done (bad arguments, unreadable checkpoint, no device).
"""

from __future__ import annotations

import argparse
import difflib
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


def unrecognized_line(parser: argparse.ArgumentParser, command: str, extra: Sequence[str]) -> str:
    """The one line for arguments ``command`` does not take: each unknown option's closest
    option of ``command`` (a typo), and where its options are listed."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    options = [o for a in sub.choices[command]._actions for o in a.option_strings]
    guesses = []
    for token in extra:
        if token.startswith("-"):
            close = difflib.get_close_matches(token.split("=", 1)[0], options, n=1, cutoff=0.6)
            guesses += [f" {token.split('=', 1)[0]}: did you mean {close[0]}?"] if close else []
    return (
        f"vitviz-cli {command}: unrecognized arguments: {' '.join(extra)}.{''.join(guesses)} "
        f"`vitviz-cli {command} --help` lists its options."
    )


def unknown_command_line(parser: argparse.ArgumentParser, word: str) -> str | None:
    """The one line for a first word that is no command (a typo: its closest command), or None
    when ``word`` is a command or an option (argparse answers those)."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    if word.startswith("-") or word in sub.choices:
        return None
    close = difflib.get_close_matches(word, list(sub.choices), n=1, cutoff=0.6)
    guess = f" Did you mean {close[0]}?" if close else ""
    return (
        f"vitviz-cli: {word!r} is not a command.{guess} The commands: "
        f"{', '.join(sub.choices)} (`vitviz-cli --help` says what each does)."
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    words = list(sys.argv[1:] if argv is None else argv)
    wrong = unknown_command_line(parser, words[0]) if words else None
    if wrong is not None:
        say(wrong)
        return EXIT_FAILED
    args, extra = parser.parse_known_args(words)
    if extra:  # one line naming the sub-command's closest option, not the top-level usage
        say(unrecognized_line(parser, args.command, extra))
        return EXIT_FAILED
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
