"""``vitviz-cli patch CLEAN CORRUPTED --checkpoint C --out OUT``: activation patching (DESIGN §5,
"Interventions"): the corrupted image's pass with one head's output taken from the clean
image's, for every head; effect (y_c(patched) − y_c(corrupted)) / (y_c(clean) − y_c(corrupted)),
c the clean image's top class (or --class). ``OUT/<clean>_to_<corrupted>_patching.npz``
(``patching_effect`` (L, H), ``target_class``, ``clean_logits``, ``corrupted_logits``) and its
PNG; two folders pair their images by file name and add ``patching_summary.npz`` / ``.png``
(mean and standard deviation)."""

from __future__ import annotations

import argparse
from pathlib import Path

from vitviz.cli.ablate_work import row_labels
from vitviz.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_PARTIAL,
    CliError,
    SubParsers,
    make_out_folder,
)
from vitviz.cli.head_effect_options import add_model_options, add_run_options, open_model
from vitviz.core.console import say


def add_parser(subparsers: SubParsers) -> None:
    p = subparsers.add_parser(
        "patch",
        help="activation patching of every head from a clean image into a corrupted one",
        description="For every layer and head: the corrupted image's pass with that head's "
        "output from the clean image's pass, scored as (y_c(patched) − y_c(corrupted)) / "
        "(y_c(clean) − y_c(corrupted)). Two folders: images paired by file name.",
    )
    p.add_argument("clean", type=Path, help="the clean image (or a folder)")
    p.add_argument("corrupted", type=Path, help="the corrupted image (or a folder)")
    add_model_options(p)
    add_run_options(p, "vitviz-patch")
    p.set_defaults(func=cmd_patch, model_code=None, model_args=None)


def pairs(clean: Path, corrupted: Path) -> list[tuple[Path, Path]]:
    """(clean, corrupted) image pairs: two files, or two folders' images of the same name."""
    from vitviz.imaging.loading import ImageLoadError, list_images

    if clean.is_dir() != corrupted.is_dir():
        raise CliError("give two images or two folders, not one of each")
    if not clean.is_dir():
        return [(clean, corrupted)]
    try:
        a, b = list_images(clean), list_images(corrupted)
    except ImageLoadError as exc:
        raise CliError(str(exc)) from exc
    by_name = {p.name: p for p in b}
    out = [(p, by_name[p.name]) for p in a if p.name in by_name]
    if not out:
        raise CliError(f"{clean} and {corrupted} hold no images of the same file name")
    names = {clean: {p.name for p in a}, corrupted: set(by_name)}
    for folder, other, images in ((clean, corrupted, a), (corrupted, clean, b)):
        alone = [p.name for p in images if p.name not in names[other]]
        if alone:  # said, not silently left out
            listed = ", ".join(alone[:5]) + (f", … ({len(alone)} in all)" if len(alone) > 5 else "")
            say(f"vitviz-cli: not patched, no namesake in {other}: {listed} (in {folder})")
    return out


def cmd_patch(args: argparse.Namespace) -> int:
    from vitviz.core.errors import VitvizError
    from vitviz.pipeline.effects_export import grid_png, patching_arrays, summary_arrays, write_npz
    from vitviz.pipeline.export import output_stem
    from vitviz.pipeline.head_effects import patching_effects

    todo = pairs(args.clean, args.corrupted)
    loaded = open_model(args)
    make_out_folder(args.out)
    kind = loaded.kind
    names, grids, labels, failed = [], [], [], 0
    for i, (a, b) in enumerate(todo):
        try:
            clean, corrupted = kind.analyze(loaded, a), kind.analyze(loaded, b)
            effects = patching_effects(
                loaded, clean.input, corrupted.input, args.target_class, args.batch_size
            )
        except (VitvizError, ValueError) as exc:
            say(f"vitviz-cli: skipped {a.name} -> {b.name}: {exc}")
            failed += 1
            continue
        labels = row_labels(loaded, clean)
        stem = output_stem(f"{a.stem}_to_{b.stem}")
        write_npz(args.out / f"{stem}_patching.npz", patching_arrays(effects))
        c = effects.target
        title = f"patching {a.name} into {b.name}: {loaded.class_names[c]} (class {c})"
        sub = "(y_c(patched) - y_c(corrupted)) / (y_c(clean) - y_c(corrupted))"
        grid_png(args.out / f"{stem}_patching.png", effects.effect.numpy(), [title, sub], labels)
        names.append(f"{a.name}->{b.name}")
        grids.append(effects.effect.numpy())
        say(f"[{i + 1}/{len(todo)}] {a.name} -> {b.name} -> {args.out / stem}_patching.npz")
    if not grids:
        return EXIT_FAILED
    if len(grids) > 1:
        arrays = summary_arrays("patching_effect", grids, names)
        write_npz(args.out / "patching_summary.npz", arrays)
        grid_png(args.out / "patching_summary.png", arrays["patching_effect_mean"],
                 [f"patching effects over {len(grids)} pairs", "mean over the pairs"],
                 labels)  # fmt: skip
        summary = args.out / "patching_summary.npz"
        say(f"mean and standard deviation over {len(grids)} pairs -> {summary}")
    return EXIT_PARTIAL if failed else EXIT_OK
