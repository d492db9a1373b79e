"""vitviz-cli, the headless twin of the window: one module per sub-command (explain, info, convert,
verify, methods, faithfulness, stats; train is ``vitviz.training.command``), ``common`` for what
they share, ``parser`` for the parser and ``main``. The sub-command modules import ``common`` and
lower layers only, never this package, so the package has no import circle."""

from __future__ import annotations

from vitviz.cli.parser import build_parser, main

__all__ = ["build_parser", "main"]
