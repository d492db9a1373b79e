"""``vitviz-cli compare IMAGE... --checkpoint A --checkpoint B --out OUT``: two models on the
same images (``vitviz.pipeline.compare``): per image ``<stem>_compare.npz`` (head similarity,
both models' logits and probabilities, each one's rollout) and ``<stem>_compare.png`` (the two
rollouts side by side); a folder gives ``<folder>_compare.npz``, the mean over its images."""

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
from vitviz.cli.compare_work import compare_base, compare_image, exit_status, write_mean
from vitviz.cli.engine_options import add_engine_options, check_engine_options, engine_inputs
from vitviz.cli.shared_options import (
    add_checkpoints_options,
    add_device_option,
    add_out_option,
)
from vitviz.cluster.inputs import LIST_SUFFIXES
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
    add_checkpoints_options(p, "checkpoint file, given twice: model A, then model B")
    add_out_option(p, "vitviz-compare")
    add_device_option(p)
    add_engine_options(p)
    p.set_defaults(func=cmd_compare)


def cmd_compare(args: argparse.Namespace) -> int:
    from vitviz.core.devices import resolve_device
    from vitviz.imaging.loading import ImageLoadError, list_images

    if len(args.checkpoints) != 2:
        raise CliError(f"compare takes --checkpoint twice (A and B), got {len(args.checkpoints)}")
    check_engine_options(args)
    ray = args.engine == "ray"
    jobs: list[tuple[str, list[Path], bool]] = []  # (stem, images, a folder's mean)
    try:
        for given in args.images:
            if given.is_dir():
                listed = engine_inputs(args, [given]) if ray else list_images(given)
                if not listed:
                    raise no_images(given)
                jobs.append((given.name or "folder", listed, True))
            elif given.is_file() and not (ray and given.suffix.lower() in LIST_SUFFIXES):
                jobs.append((given.stem, [given], False))
            elif ray:  # a glob or a list of paths: each image on its own
                jobs += [(p.stem, [p], False) for p in engine_inputs(args, [given])]
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
    if ray:  # the same per-image work (compare_image) on Ray's workers (DESIGN §7)
        from vitviz.cli.on_ray import compare_on_ray

        return compare_on_ray(args, jobs, [m.class_names for m in models])
    from vitviz.cluster.record import LocalRunFiles

    for loaded in models:
        loaded.model.to(device)
    failed = written = 0
    total = sum(len(images) for _, images, _ in jobs)
    with LocalRunFiles(args.out, "compare", say, total) as files:  # run.json, as Ray's
        first = 0  # each image's index in the run, as the Ray engine numbers them
        for stem, images, mean in jobs:
            done, failures = _compare(models, stem, images, mean, args.out, (files, first))
            written += done
            failed += failures
            first += len(images)
    return exit_status(written, failed)


def _compare(
    models: list, stem: str, images: list[Path], mean: bool, out: Path, rows: tuple[Any, int]
) -> tuple[int, int]:
    """Writes one job's outputs, each image's row to ``rows`` (the run's ``LocalRunFiles`` and
    the index of the job's first image); (outputs written, images failed)."""
    from vitviz.cli.on_ray import compare_record
    from vitviz.cluster.job import Outcome
    from vitviz.core.errors import VitvizError
    from vitviz.imaging.loading import ImageLoadError

    files, first = rows
    results, failed = [], 0
    for index, image in enumerate(images, start=first):
        base = None if mean else compare_base(out, stem)
        try:
            comparison = compare_image(models, image, base)
        except (ImageLoadError, VitvizError, ValueError) as exc:
            say(f"vitviz-cli: skipped {image}: {exc}")
            files.add(Outcome(index, str(image), None, str(exc)))
            failed += 1
            continue
        files.add(Outcome(index, str(image), compare_record(comparison, mean)))
        results.append(comparison)
        if base is not None:
            say(f"{image} -> {base.with_suffix('.npz')}, {base.with_suffix('.png')}")
    if mean:
        return write_mean([m.class_names for m in models], stem, results, out), failed
    return len(results), failed
