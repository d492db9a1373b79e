"""The per-image work of ``vitviz-cli ablate`` and its summary, which every engine calls (the
local command and its job on Ray, DESIGN §7): one image's head effects and files, and the mean
and standard deviation over the images in their order."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from vitviz.core.console import say


def row_labels(loaded: Any, analysis: Any) -> list[str]:
    return [row.label for row in loaded.kind.layer_rows(analysis)]


def ablate_image(loaded: Any, path: Path, stem: str, args: argparse.Namespace) -> tuple[Any, list]:
    """One image's head effects (``HeadEffects``; ``effect`` (L, H)) and the grid's row labels;
    ``OUT/<stem>_ablation.png`` then ``OUT/<stem>_ablation.npz`` written (atomically, the npz
    last: its presence says the image is done). Every engine calls this (DESIGN §7)."""
    from vitviz.pipeline.effects_export import ablation_arrays, grid_png, write_npz
    from vitviz.pipeline.head_effects import head_effects

    analysis = loaded.kind.analyze(loaded, path)
    effects = head_effects(
        loaded, analysis.input, args.target_class, args.ablation, args.batch_size
    )
    labels = row_labels(loaded, analysis)
    c = effects.target
    title = f"{path.name}: head effects on {loaded.class_names[c]} (class {c})"
    sub = f"y_c(full) - y_c(head knocked out, {args.ablation}), logits"
    grid_png(args.out / f"{stem}_ablation.png", effects.effect.numpy(), [title, sub], labels)
    write_npz(args.out / f"{stem}_ablation.npz", ablation_arrays(effects))
    return effects, labels


def write_summary(args: argparse.Namespace, names: list[str], grids: list, labels: list) -> None:
    """Over several images ``OUT/ablation_summary.npz`` and ``.png``: the mean and standard
    deviation of the (L, H) effects, reduced in the images' order."""
    from vitviz.pipeline.effects_export import grid_png, summary_arrays, write_npz

    if len(grids) < 2:
        return
    arrays = summary_arrays("head_effect", grids, names)
    write_npz(args.out / "ablation_summary.npz", arrays)
    title = f"head effects over {len(grids)} images ({args.ablation} ablation)"
    grid_png(args.out / "ablation_summary.png", arrays["head_effect_mean"],
             [title, "mean of y_c(full) - y_c(head knocked out), each image's c"],
             labels)  # fmt: skip
    summary = args.out / "ablation_summary.npz"
    say(f"mean and standard deviation over {len(grids)} images -> {summary}")
