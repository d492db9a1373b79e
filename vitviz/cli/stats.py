"""``vitviz-cli stats FOLDER --checkpoint C [--checkpoint C2 …] --out DIR``: head statistics
of each checkpoint over the images of a folder (``vitviz.pipeline.folder_stats``): ``stats.csv`` and
``stats.png`` (distance by depth, one dot per head, one colour per checkpoint)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from vitviz.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_PARTIAL,
    CliError,
    SubParsers,
    add_hub_options,
    load,
    no_images,
)
from vitviz.cli.engine_options import add_engine_options, check_engine_options, engine_inputs
from vitviz.core.console import say


def add_parser(subparsers: SubParsers) -> None:
    p = subparsers.add_parser(
        "stats",
        help="head statistics over a folder of images: stats.csv and a distance-by-depth plot",
        description="Mean and standard deviation over the folder's images of each head's mean "
        "attention distance (pixels of the model input), entropy (nats) and prefix share, per "
        "checkpoint; the same per-image definitions as the explain .npz.",
    )
    p.add_argument("folder", type=Path, help="folder of images (not recursive)")
    p.add_argument(
        "--checkpoint",
        dest="checkpoints",
        type=Path,
        action="append",
        required=True,
        help="checkpoint file, repeatable (e.g. epoch 1 and the best of a run)",
    )
    p.add_argument("--config", type=Path, help="JSON with model settings the weights lack")
    add_hub_options(p)
    p.add_argument(
        "--out",
        type=Path,
        default=Path("vitviz-stats"),
        help="output folder (default: %(default)s)",
    )
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N | mps")
    p.add_argument(
        "--batch-size", type=int, default=None, metavar="N", help="images per forward pass"
    )
    add_engine_options(p)
    p.set_defaults(func=cmd_stats)


def cmd_stats(args: argparse.Namespace) -> int:
    from vitviz.cluster.record import LocalRunFiles
    from vitviz.core.devices import resolve_device
    from vitviz.imaging.loading import ImageLoadError, list_images
    from vitviz.imaging.overlay import save_png
    from vitviz.pipeline.folder_stats import distance_plot, write_csv

    if args.batch_size is not None and args.batch_size < 1:
        raise CliError(f"--batch-size must be at least 1, got {args.batch_size}")
    check_engine_options(args)
    try:
        local = args.engine == "local"
        images = list_images(args.folder) if local else engine_inputs(args, [args.folder])
        device = resolve_device(args.device)
    except (ImageLoadError, ValueError) as exc:
        raise CliError(str(exc)) from exc
    if not images:
        raise no_images(args.folder)
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CliError(f"--out {args.out}: cannot create it ({exc.strerror or exc})") from exc
    if args.engine == "ray":  # the same per-image work on Ray's workers (DESIGN §7)
        from vitviz.cli.on_ray import stats_on_ray

        return stats_on_ray(args, images)
    results = []
    with LocalRunFiles(args.out, "stats", say, len(images) * len(args.checkpoints)) as files:
        for path in args.checkpoints:
            results.append(_statistics_here(args, path, images, device, files))
    if all(r.images == 0 for r in results):
        say("vitviz-cli: no image could be analysed")
        return EXIT_FAILED
    csv_path = write_csv(results, args.out / "stats.csv")
    png_path = save_png(distance_plot(results), args.out / "stats.png")
    say(f"{len(images)} images × {len(results)} checkpoint(s) -> {csv_path}, {png_path}")
    return EXIT_PARTIAL if any(r.failed for r in results) else EXIT_OK


def _statistics_here(
    args: argparse.Namespace, path: Path, images: list[Path], device: Any, files: Any
) -> Any:
    """The local engine: one checkpoint's statistics over the images, in this process; each
    image's record to ``files`` (run.json and images.parquet, as on Ray)."""
    from vitviz.cli.on_ray import image_outcome
    from vitviz.pipeline.folder_stats import folder_statistics

    loaded = load(path, args.config, args)
    loaded.model.to(device)

    def progress(done: int, total: int, image: Path, error: str | None) -> None:
        if error is not None:
            say(f"vitviz-cli: skipped {image}: {error}")
        elif done == total or done % 10 == 0:
            say(f"[{path.name}] {done}/{total} images")

    def each(item: Any) -> None:
        files.add(image_outcome(loaded, images[item.index], item), str(path))

    return folder_statistics(
        loaded, images, str(path), batch_size=args.batch_size, progress=progress, each=each
    )
