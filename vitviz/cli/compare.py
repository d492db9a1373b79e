"""``vitviz-cli compare IMAGE... --checkpoint A --checkpoint B --out OUT``: two models on the
same images (``vitviz.pipeline.compare``): per image ``<stem>_compare.npz`` (head similarity,
both models' logits and probabilities, each one's rollout) and ``<stem>_compare.png`` (the two
rollouts side by side); a folder gives ``<folder>_compare.npz``, the mean over its images."""

from __future__ import annotations

import argparse
from pathlib import Path

from vitviz.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_PARTIAL,
    CliError,
    SubParsers,
    add_hub_options,
    load,
)
from vitviz.core.console import say


def add_parser(subparsers: SubParsers) -> None:
    p = subparsers.add_parser(
        "compare",
        help="two checkpoints on the same images: head similarity, both predictions, rollouts",
        description="Head similarity (cosine of the two models' CLS or pooled-query attention "
        "over the patches, per layer and head; per layer by relative depth when the shapes "
        "differ), both models' logits and each one's rollout. A folder gives the mean over "
        "its images.",
    )
    p.add_argument("images", type=Path, nargs="+", help="image files or folders of images")
    p.add_argument(
        "--checkpoint",
        dest="checkpoints",
        type=Path,
        action="append",
        required=True,
        help="checkpoint file, given twice: model A, then model B",
    )
    p.add_argument("--config", type=Path, help="JSON with model settings the weights lack")
    add_hub_options(p)
    p.add_argument("--out", type=Path, default=Path("vitviz-compare"), help="output folder")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N | mps")
    p.set_defaults(func=cmd_compare)


def cmd_compare(args: argparse.Namespace) -> int:
    from vitviz.core.devices import resolve_device
    from vitviz.imaging.loading import ImageLoadError, list_images

    if len(args.checkpoints) != 2:
        raise CliError(f"compare takes --checkpoint twice (A and B), got {len(args.checkpoints)}")
    jobs: list[tuple[str, list[Path], bool]] = []  # (stem, images, a folder's mean)
    try:
        for given in args.images:
            if given.is_dir():
                listed = list_images(given)
                if not listed:
                    raise CliError(f"{given}: the folder holds no images")
                jobs.append((given.name or "folder", listed, True))
            elif given.is_file():
                jobs.append((given.stem, [given], False))
            else:
                raise CliError(f"{given}: no such image or folder")
        device = resolve_device(args.device)
    except (ImageLoadError, ValueError) as exc:
        raise CliError(str(exc)) from exc
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CliError(f"--out {args.out}: cannot create it ({exc.strerror or exc})") from exc
    models = [load(path, args.config, args) for path in args.checkpoints]
    for loaded in models:
        loaded.model.to(device)
    failed = written = 0
    for stem, images, mean in jobs:
        done, failures = _compare(models, stem, images, mean, args.out)
        written += done
        failed += failures
    if not written:
        say("vitviz-cli: no image could be compared")
        return EXIT_FAILED
    return EXIT_PARTIAL if failed else EXIT_OK


def _compare(models: list, stem: str, images: list[Path], mean: bool, out: Path) -> tuple[int, int]:
    """Writes one job's outputs; (outputs written, images failed)."""
    from vitviz.core.errors import VitvizError
    from vitviz.imaging.loading import ImageLoadError
    from vitviz.imaging.overlay import save_png
    from vitviz.pipeline.analysis import analyze
    from vitviz.pipeline.compare import (
        compare_analyses,
        mean_comparison,
        side_by_side,
        write_compare_npz,
    )
    from vitviz.pipeline.export import output_stem

    a_model, b_model = models
    results, failed = [], 0
    for image in images:
        try:
            a, b = analyze(a_model, image), analyze(b_model, image)
            comparison = compare_analyses(a_model, a, b_model, b)
        except (ImageLoadError, VitvizError, ValueError) as exc:
            say(f"vitviz-cli: skipped {image}: {exc}")
            failed += 1
            continue
        results.append(comparison)
        if not mean:
            base = out / f"{output_stem(stem)}_compare"
            npz = write_compare_npz(comparison, base.with_suffix(".npz"), a.class_names,
                                    b.class_names)  # fmt: skip
            png = save_png(side_by_side(a, b, comparison), base.with_suffix(".png"))
            say(f"{image} -> {npz}, {png}")
    if mean and results:
        try:
            comparison = mean_comparison(results)
        except ValueError as exc:  # rollouts of images on other grids can't be averaged
            say(f"vitviz-cli: {stem}: {exc}")
            return 0, failed
        npz = out / f"{output_stem(stem)}_compare.npz"
        write_compare_npz(comparison, npz, a_model.class_names, b_model.class_names)
        say(f"{len(results)} images of {stem} -> {npz} (the mean)")
    return len(results), failed
