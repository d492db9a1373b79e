"""The per-image work of ``vitviz-cli compare`` and a folder's mean, which every engine calls
(the local command and its job on Ray, DESIGN §7)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vitviz.cli.common import EXIT_FAILED, EXIT_OK, EXIT_PARTIAL
from vitviz.core.console import say


def exit_status(written: int, failed: int) -> int:
    if not written:
        say("vitviz-cli: no image could be compared")
        return EXIT_FAILED
    return EXIT_PARTIAL if failed else EXIT_OK


def compare_image(models: list, image: Path, base: Path | None) -> Any:
    """Both models on one image: its ``Comparison``; with ``base`` (``OUT/<stem>_compare``)
    ``base.png`` then ``base.npz`` written (atomically, the npz last). Every engine calls this
    (DESIGN §7)."""
    from vitviz.imaging.overlay import save_png
    from vitviz.pipeline.analysis import analyze
    from vitviz.pipeline.compare import compare_analyses, side_by_side, write_compare_npz

    a_model, b_model = models
    a, b = analyze(a_model, image), analyze(b_model, image)
    comparison = compare_analyses(a_model, a, b_model, b)
    if base is not None:
        save_png(side_by_side(a, b, comparison), base.with_suffix(".png"))
        write_compare_npz(comparison, base.with_suffix(".npz"), a.class_names, b.class_names)
    return comparison


def compare_base(out: Path, stem: str) -> Path:
    """``OUT/<stem>_compare``: where an image's (or a folder's) files go, without the suffix."""
    from vitviz.pipeline.export import output_stem

    return out / f"{output_stem(stem)}_compare"


def write_mean(class_names: list, stem: str, results: list, out: Path) -> int:
    """A folder's ``OUT/<folder>_compare.npz``, the mean over its images' comparisons (in the
    images' order); the images written (0: none, or they can't be averaged)."""
    from vitviz.pipeline.compare import mean_comparison, write_compare_npz

    if not results:
        return 0
    try:
        comparison = mean_comparison(results)
    except ValueError as exc:  # rollouts of images on other grids can't be averaged
        say(f"vitviz-cli: {stem}: {exc}")
        return 0
    npz = compare_base(out, stem).with_suffix(".npz")
    write_compare_npz(comparison, npz, *class_names)
    say(f"{len(results)} images of {stem} -> {npz} (the mean)")
    return len(results)
