"""The check every `vitviz-cli` test of a refusal makes: the command wrote one line to stderr,
no traceback, naming what it was told to."""

from __future__ import annotations

import pytest


def one_line_error(capsys: pytest.CaptureFixture, *words: str) -> str:
    """The one line the command wrote to stderr (no traceback), holding every one of
    ``words``; returns it."""
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert "Traceback" not in captured.err
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]
