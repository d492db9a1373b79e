"""The end of a ``vitviz-cli stats`` run, on either engine: ``stats.csv`` and ``stats.png`` of
the checkpoints' statistics, the line saying so, and the exit status."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vitviz.cli.common import EXIT_FAILED, EXIT_OK, EXIT_PARTIAL
from vitviz.core.console import say


def write_stats_report(out: Path, images: int, results: Sequence[Any]) -> int:
    """Writes ``out/stats.csv`` and ``out/stats.png`` from each checkpoint's
    ``FolderStatistics`` over ``images`` images; the exit status (nothing written and
    EXIT_FAILED when no image could be analysed)."""
    from vitviz.imaging.overlay import save_png
    from vitviz.pipeline.folder_stats import distance_plot, write_csv

    if all(r.images == 0 for r in results):
        say("vitviz-cli: no image could be analysed")
        return EXIT_FAILED
    csv_path = write_csv(results, out / "stats.csv")
    png_path = save_png(distance_plot(results), out / "stats.png")
    say(f"{images} images × {len(results)} checkpoint(s) -> {csv_path}, {png_path}")
    return EXIT_PARTIAL if any(r.failed for r in results) else EXIT_OK
