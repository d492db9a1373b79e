"""``vitviz-cli stats FOLDER --checkpoint C [--checkpoint C2 …] --out DIR``: head statistics
of each checkpoint over the images of a folder (``vitviz.pipeline.folder_stats``): ``stats.csv`` and
``stats.png`` (distance by depth, one dot per head, one colour per checkpoint)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from vitviz.cli.common import (
    CliError,
    SubParsers,
    load,
    no_images,
)
from vitviz.cli.engine_options import add_engine_options, check_engine_options, engine_inputs
from vitviz.cli.shared_options import (
    add_batch_size_option,
    add_checkpoints_options,
    add_device_option,
    add_out_option,
    check_batch_size,
)
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
    add_checkpoints_options(p, "checkpoint file, repeatable (e.g. epoch 1 and the best of a run)")
    add_out_option(p, "vitviz-stats")
    add_device_option(p)
    add_batch_size_option(p, "images per forward pass")
    add_engine_options(p)
    p.set_defaults(func=cmd_stats)


def cmd_stats(args: argparse.Namespace) -> int:
    from vitviz.cli.stats_report import write_stats_report
    from vitviz.cluster.record import LocalRunFiles
    from vitviz.core.devices import resolve_device
    from vitviz.imaging.loading import ImageLoadError, list_images

    check_batch_size(args)
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
    return write_stats_report(args.out, len(images), results)


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
