"""The docs' command lines are the parser's: every `--flag` a document writes after
`vitviz-cli COMMAND` (code blocks and prose, continued lines included) and every flag in
docs/cli.md's section of a command is an option of that command, and docs/cli.md names every
option of every command (`vitviz-cli COMMAND --help` has the details)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from vitviz.cli.parser import build_parser

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
CLI_DOC = REPO / "docs" / "cli.md"
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)(?![\w-])")
# `vitviz-cli explain …`, not a message's `vitviz-cli explain: …` nor `vitviz-cli: …`
COMMAND_LINE = re.compile(r"vitviz-cli[ \t]+(\w+)\b(?!:)([^\n]*)")


def options() -> dict[str, set[str]]:
    """Each sub-command's option strings."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {
        name: {o for a in p._actions for o in a.option_strings} for name, p in sub.choices.items()
    }


def command_lines(text: str) -> list[tuple[str, str]]:
    """(command, the rest of its line and of the lines a trailing backslash continues), for
    every `vitviz-cli COMMAND` in ``text``; an inline one ends at its closing backtick."""
    lines = text.splitlines()
    found = []
    for i, line in enumerate(lines):
        for m in COMMAND_LINE.finditer(line):
            rest, j = m.group(2), i
            while rest.rstrip().endswith("\\") and j + 1 < len(lines):
                j += 1
                rest = rest.rstrip()[:-1] + " " + lines[j]
            found.append((m.group(1), rest.split("`", 1)[0]))
    return found


def flags_written(text: str) -> list[tuple[str, str]]:
    """(command, flag) for each flag a document writes on a `vitviz-cli COMMAND` line."""
    known = options()
    out = []
    for command, rest in command_lines(text):
        if command.isupper():  # a placeholder: `vitviz-cli COMMAND --help`
            continue
        assert command in known, f"vitviz-cli {command}: no such command"
        out += [(command, flag) for flag in FLAG.findall(rest)]
    return out


def test_the_parser_of_the_check_refuses_what_it_should() -> None:
    """The reader finds flags on continued lines and inline, and skips messages."""
    text = (
        "run `vitviz-cli stats photos/ --out s/` or\n"
        "vitviz-cli faithfulness x.png --steps 3 \\\n    --masks m/\n"
        "vitviz-cli explain: unrecognized arguments: --methdo\n"
    )
    assert flags_written(text) == [
        ("stats", "--out"),
        ("faithfulness", "--steps"),
        ("faithfulness", "--masks"),
    ]
    with pytest.raises(AssertionError, match="no such command"):
        flags_written("`vitviz-cli explian cat.jpg`")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_flag_a_document_writes_is_its_commands(doc: Path) -> None:
    known = options()
    wrong = [
        f"vitviz-cli {command} {flag}"
        for command, flag in flags_written(doc.read_text())
        if flag not in known[command]
    ]
    assert not wrong, f"{doc.name}: {wrong}"


def test_every_flag_in_a_commands_section_of_cli_md_is_its() -> None:
    """`## explain`, `## ablate and patch`, …: the flags of the section's command(s)."""
    known = options()
    wrong = []
    for section in re.split(r"\n## ", CLI_DOC.read_text())[1:]:
        title = section.split("\n", 1)[0]
        commands = [w for w in re.findall(r"\w+", title) if w in known]
        if not commands:
            continue
        for flag in set(FLAG.findall(section)):
            if not any(flag in known[c] for c in commands):
                wrong.append(f"{title}: {flag}")
    assert not wrong, wrong


def test_cli_md_names_every_option_of_every_command() -> None:
    text = CLI_DOC.read_text()
    missing = [
        f"{command} {flag}"
        for command, flags in options().items()
        for flag in sorted(flags)
        if flag.startswith("--")
        and flag != "--help"
        and not re.search(re.escape(flag) + r"(?![\w-])", text)
    ]
    assert not missing, f"docs/cli.md does not name: {missing}"


def test_every_option_has_a_help_text() -> None:
    """`vitviz-cli COMMAND --help` says what each option does (cli.md sends readers there)."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    silent = [
        f"{name} {a.option_strings[-1]}"
        for name, p in sub.choices.items()
        for a in p._actions
        if a.option_strings and not a.help
    ]
    assert not silent, silent
