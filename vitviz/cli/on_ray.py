"""``explain``, ``stats`` and ``faithfulness`` on the Ray engine (DESIGN §7): each command's
per-image work as an ``ImageJob`` (the pipeline's functions the local engine calls: analyses
in batches, the maps, the files written by the worker; the faithfulness measure of one image),
and the driver's side: the outcomes in the inputs' order reduced as the local engine reduces
them, into the same summary files. Ray itself is imported by ``vitviz.cluster`` only."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from vitviz.cli.common import EXIT_FAILED, EXIT_OK, EXIT_PARTIAL, load, load_for, make_out_folder
from vitviz.cli.engine_options import ray_options
from vitviz.cli.image_outcomes import image_outcomes
from vitviz.cli.output_stems import output_stems
from vitviz.cluster.job import ImageItem, Outcome
from vitviz.core.console import say

if TYPE_CHECKING:
    from vitviz.explain.faithfulness import ImageFaithfulness
    from vitviz.pipeline.export import MapSettings

TASK_IMAGES = 8  # images a worker takes at a time without --batch-size
FAITHFULNESS_TASK_IMAGES = 2  # each image is 2 × (steps + 1) forward passes per method


def image_items(paths: Sequence[Path]) -> list[ImageItem]:
    return [
        ImageItem(i, str(p), s)
        for i, (p, s) in enumerate(zip(paths, output_stems(paths), strict=True))
    ]


def image_record(loaded: Any, analysis: Any, target_class: int | None) -> dict[str, Any]:
    """The small per-image record sent back to the driver: the target class, the top 5
    classes with their probabilities and the head statistics (``ModelKind.head_statistics``,
    (L, H) as nested lists)."""
    record: dict[str, Any] = {"target_class": target_class}
    probs = analysis.probs.detach().float().cpu().numpy().reshape(-1)
    if probs.size:
        top = np.argsort(-probs, kind="stable")[:5]
        record["top5"] = [[int(c), float(probs[c])] for c in top]
    try:
        stats = loaded.kind.head_statistics(analysis)
    except ValueError:  # an analysis without attention to measure (kept layers only)
        stats = {}
    record["statistics"] = {k: np.asarray(v, np.float64).tolist() for k, v in stats.items()}
    return record


def image_outcome(loaded: Any, path: Path, item: Any, index: int | None = None) -> Outcome:
    """One analysed image's Outcome (``item`` its ``BatchItem``): its record, the target its
    top class where the model has a head, or its error; ``index``: its place in the run
    (None: the item's)."""
    index = item.index if index is None else index
    if item.error is not None:
        return Outcome(index, str(path), None, str(item.error))
    has_head = item.analysis.probs.numel() > 0
    target = item.analysis.top_class if has_head else None
    return Outcome(index, str(path), image_record(loaded, item.analysis, target))


def faithfulness_record(result: ImageFaithfulness, probs: Any) -> dict[str, Any]:
    """The per-image record of ``faithfulness``: the target class, the top 5 with their
    probabilities, the steps and every method's curves (``ImageFaithfulness.to_dict``)."""
    p = probs.detach().float().cpu().numpy().reshape(-1)
    top = np.argsort(-p, kind="stable")[:5]
    return {
        "target_class": int(result.target_class),
        "top5": [[int(c), float(p[c])] for c in top],
        "steps": int(result.steps),
        "faithfulness": result.to_dict(),
    }


def _open(args: argparse.Namespace, checkpoint: Path | None = None) -> Any:
    """The model on the worker, on ``--device`` (the worker's own GPU where it has one)."""
    from vitviz.core.devices import resolve_device

    loaded = load_for(args) if checkpoint is None else load(checkpoint, args.config, args)
    loaded.model.to(resolve_device(args.device)).eval()
    return loaded


# -- the jobs (they travel to the workers) ---------------------------------------------------------


@dataclass
class ExplainJob:
    """``explain``'s work: analyses in batches, maps, ``<stem>_*.png`` then ``<stem>.npz``
    (written last: its presence says the image is complete)."""

    args: argparse.Namespace
    settings: MapSettings

    def open(self) -> Any:
        return _open(self.args)

    def run(self, loaded: Any, items: list[ImageItem]) -> list[Outcome]:
        from vitviz.imaging.reduction import OVERLAY_MAX_SIDE
        from vitviz.pipeline.attention_dtype import ATTENTION_DTYPES
        from vitviz.pipeline.batch import iter_kind_analyses
        from vitviz.pipeline.export import compute_maps, write_npz, write_pngs

        a = self.args
        max_side = None if a.full_size else OVERLAY_MAX_SIDE
        has_head = loaded.model.config.num_classes > 0
        analyses = iter_kind_analyses(
            loaded,
            [Path(it.path) for it in items],
            batch_size=a.batch_size,
            attention_dtype=ATTENTION_DTYPES[a.attention_dtype],
            gradients=has_head,
            max_side=max_side,
            layers=getattr(a, "kept_layers", None),
        )
        out = []
        for b in analyses:
            it = items[b.index]
            if b.error is not None:
                out.append(Outcome(it.index, it.path, None, str(b.error)))
                continue
            maps = compute_maps(b.analysis, self.settings)
            write_pngs(b.analysis, maps, a.out, it.stem, a.colormap, max_side=max_side,
                       titled=not a.bare, settings=self.settings)  # fmt: skip
            write_npz(b.analysis, maps, a.out / f"{it.stem}.npz")
            target = maps.target_class if has_head else None
            out.append(Outcome(it.index, it.path, image_record(loaded, b.analysis, target)))
            del b, maps
        return out

    def complete(self, item: ImageItem, record: dict[str, Any] | None) -> bool:
        return (self.args.out / f"{item.stem}.npz").is_file()


@dataclass
class StatsJob:
    """``stats``' work for one checkpoint: forward passes in batches, each image's head
    statistics."""

    args: argparse.Namespace
    checkpoint: Path

    def open(self) -> Any:
        return _open(self.args, self.checkpoint)

    def run(self, loaded: Any, items: list[ImageItem]) -> list[Outcome]:
        from vitviz.pipeline.batch import iter_kind_analyses

        out = []
        paths = [Path(it.path) for it in items]
        for b in iter_kind_analyses(loaded, paths, batch_size=self.args.batch_size):
            it = items[b.index]
            out.append(image_outcome(loaded, Path(it.path), b, it.index))
        return out

    def complete(self, item: ImageItem, record: dict[str, Any] | None) -> bool:
        return record is not None and bool(record.get("statistics"))


@dataclass
class FaithfulnessJob:
    """``faithfulness``' work: ``measure`` (the command's own measure of one image).
    ``opener``: how a worker opens the model (the window's checkpoint and preprocessing,
    picklable); None: from the command's arguments."""

    args: argparse.Namespace
    names: list[str]
    params: dict[str, Any]
    measure: Callable[..., Any]
    opener: Callable[[], Any] | None = None

    def open(self) -> Any:
        return _open(self.args) if self.opener is None else self.opener()

    def run(self, loaded: Any, items: list[ImageItem]) -> list[Outcome]:
        return image_outcomes(
            items,
            lambda it: self.measure(loaded, Path(it.path), self.names, self.params, self.args),
            lambda it, measured: faithfulness_record(*measured),
        )

    def complete(self, item: ImageItem, record: dict[str, Any] | None) -> bool:
        return record is not None and "faithfulness" in record


# -- the drivers -----------------------------------------------------------------------------------


@dataclass
class _Tally:
    failed: list[str] = field(default_factory=list)

    def note(self, o: Outcome) -> bool:
        """False (and the failure said) for an outcome with an error."""
        if o.error is None:
            return True
        self.failed.append(o.path)
        say(f"vitviz-cli: skipped {o.path}: {o.error}")
        return False


def _start(args: argparse.Namespace, command: str, per_task: int, methods: Sequence[str] = ()):
    from vitviz.cluster.driver import RayRun

    make_out_folder(args.out)
    options = ray_options(args, per_task)
    return RayRun(command, args.out, options, say, resume=args.resume, methods=methods)


def explain_on_ray(args: argparse.Namespace, images: Sequence[Path], settings: MapSettings) -> int:
    """``explain --engine ray``: the images' files written by the workers; the exit status."""
    items = image_items(images)
    tally = _Tally()
    job = ExplainJob(args, settings)
    with _start(args, "explain", args.batch_size or TASK_IMAGES) as run:
        say(f"vitviz-cli: explaining {len(items)} images on Ray ({run.workers} workers)")
        for o in run.outcomes(job, items):
            tally.note(o)
    if len(tally.failed) == len(items):
        return EXIT_FAILED
    say(f"{len(items) - len(tally.failed)} images -> {args.out}")
    return EXIT_PARTIAL if tally.failed else EXIT_OK


def stats_on_ray(args: argparse.Namespace, images: Sequence[Path]) -> int:
    """``stats --engine ray``: each checkpoint's statistics reduced in the images' order."""
    from vitviz.cli.stats_report import write_stats_report
    from vitviz.pipeline.folder_stats import FolderStatistics

    for path in args.checkpoints:  # each opens here first: a bad one is said before Ray starts
        load(path, args.config, args)
    items = image_items(images)
    results = []
    with _start(args, "stats", args.batch_size or TASK_IMAGES) as run:
        for path in args.checkpoints:
            stats = FolderStatistics(str(path))
            for o in run.outcomes(StatsJob(args, path), items, checkpoint=str(path)):
                if o.error is not None:
                    stats.failed.append(f"{o.path}: {o.error}")
                    say(f"vitviz-cli: skipped {o.path}: {o.error}")
                    continue
                assert o.record is not None
                stats.add({k: np.asarray(v, np.float64) for k, v in o.record["statistics"].items()})
            results.append(stats)
    return write_stats_report(args.out, len(images), results)


def faithfulness_from_record(record: dict[str, Any]) -> ImageFaithfulness:
    """The ImageFaithfulness a worker measured, from its record (JSON round trip)."""
    from vitviz.explain.faithfulness import Curves, ImageFaithfulness
    from vitviz.explain.localisation import Localisation

    d = record["faithfulness"]
    methods = {}
    for name, c in d["methods"].items():
        loc = None
        if "pointing_game" in c:
            mass = c.get("mass_in_mask")
            loc = Localisation(
                float("nan") if mass is None else float(mass), bool(c["pointing_game"])
            )
        methods[name] = Curves(
            [float(v) for v in c["deletion"]],
            [float(v) for v in c["insertion"]],
            float(c["deletion_auc"]),
            float(c["insertion_auc"]),
            loc,
        )
    return ImageFaithfulness(str(d["image"]), int(d["target_class"]), int(record["steps"]), methods)


def faithfulness_on_ray(
    args: argparse.Namespace,
    names: list[str],
    params: dict[str, Any],
    images: Sequence[Path],
    measure: Callable[..., Any],
) -> list[ImageFaithfulness]:
    """``faithfulness --engine ray``: each image measured by ``measure`` on a worker; the
    results in the images' order (those measured)."""
    items = image_items(images)
    tally = _Tally()
    results = []
    job = FaithfulnessJob(args, names, params, measure)
    with _start(args, "faithfulness", FAITHFULNESS_TASK_IMAGES, methods=names) as run:
        for o in run.outcomes(job, items):
            if tally.note(o):
                assert o.record is not None
                results.append(faithfulness_from_record(o.record))
    return results


# -- ablate and compare ----------------------------------------------------------------------------

ABLATE_TASK_IMAGES = 2  # each image is one forward pass per head


def _top5(probs: Any) -> list[list[float]]:
    p = np.asarray(probs, np.float64).reshape(-1)
    return [[int(c), float(p[c])] for c in np.argsort(-p, kind="stable")[:5]]


def ablate_record(effects: Any, labels: Sequence[str]) -> dict[str, Any]:
    """The per-image record of ``ablate``: the target class, the top 5, the (L, H) effects
    (nested lists) and the rows' labels."""
    return {
        "target_class": int(effects.target),
        "top5": _top5(effects.logits.softmax(-1).numpy()),
        "head_effect": effects.effect.numpy().tolist(),
        "labels": list(labels),
    }


@dataclass
class AblateJob:
    """``ablate``'s work: ``ablate_image`` (the command's own), each image's files written by
    the worker; the record carries the (L, H) effects the summary averages."""

    args: argparse.Namespace

    def open(self) -> Any:
        return _open(self.args)

    def run(self, loaded: Any, items: list[ImageItem]) -> list[Outcome]:
        from vitviz.cli.ablate_work import ablate_image

        return image_outcomes(
            items,
            lambda it: ablate_image(loaded, Path(it.path), it.stem, self.args),
            lambda it, measured: ablate_record(*measured),
        )

    def complete(self, item: ImageItem, record: dict[str, Any] | None) -> bool:
        done = (self.args.out / f"{item.stem}_ablation.npz").is_file()
        return done and record is not None and "head_effect" in record


def ablate_on_ray(args: argparse.Namespace, images: Sequence[Path]) -> int:
    """``ablate --engine ray``: each image's files written by a worker; the summary reduced
    here in the images' order (``write_summary``, the local engine's)."""
    from vitviz.cli.ablate_work import write_summary
    from vitviz.pipeline.export import output_stem

    items = [ImageItem(i, str(p), output_stem(p.stem)) for i, p in enumerate(images)]
    tally = _Tally()
    names, grids, labels = [], [], []
    with _start(args, "ablate", ABLATE_TASK_IMAGES) as run:
        say(f"vitviz-cli: ablating {len(items)} images on Ray ({run.workers} workers)")
        for o in run.outcomes(AblateJob(args), items):
            if tally.note(o):
                assert o.record is not None
                names.append(Path(o.path).name)
                grids.append(np.asarray(o.record["head_effect"], np.float32))
                labels = o.record["labels"]
    if not grids:
        return EXIT_FAILED
    write_summary(args, names, grids, labels)
    say(f"{len(grids)} images -> {args.out}")
    return EXIT_PARTIAL if tally.failed else EXIT_OK


@dataclass
class CompareJob:
    """``compare``'s work: ``compare_image`` (the command's own) with both models; a single
    image's files written by the worker, a folder's image sent back as its comparison's arrays
    (small: (L, H), the classes, two token grids) for the mean (``members``: their indices)."""

    args: argparse.Namespace
    members: frozenset[int]

    def open(self) -> Any:
        return [_open(self.args, path) for path in self.args.checkpoints]

    def run(self, models: Any, items: list[ImageItem]) -> list[Outcome]:
        from vitviz.cli.compare_work import compare_base, compare_image

        def base(it: ImageItem) -> Path | None:  # a folder's member: nothing written for it
            return None if it.index in self.members else compare_base(self.args.out, it.stem)

        return image_outcomes(
            items,
            lambda it: compare_image(models, Path(it.path), base(it)),
            lambda it, comparison: compare_record(comparison, it.index in self.members),
        )

    def complete(self, item: ImageItem, record: dict[str, Any] | None) -> bool:
        if item.index in self.members:
            return record is not None and "comparison" in record
        from vitviz.cli.compare_work import compare_base

        return compare_base(self.args.out, item.stem).with_suffix(".npz").is_file()


def compare_record(comparison: Any, member: bool) -> dict[str, Any]:
    """One image's row of a compare run (both engines): model A's target class and top 5; a
    folder member's whole comparison too (its folder's mean is reduced from the rows)."""
    record: dict[str, Any] = {
        "target_class": int(np.argmax(comparison.probs_a)),
        "top5": _top5(comparison.probs_a),
    }
    if member:
        record["comparison"] = {
            name: np.asarray(getattr(comparison, name)).tolist()
            for name in type(comparison).__dataclass_fields__
        }
    return record


def compare_on_ray(
    args: argparse.Namespace, jobs: Sequence[tuple[str, list[Path], bool]], class_names: list
) -> int:
    """``compare --engine ray``: ``jobs`` as the local engine has them ((stem, images, a
    folder's mean)); single images written by the workers, each folder's mean reduced here in
    its images' order (``write_mean``, the local engine's)."""
    from vitviz.cli.compare_work import exit_status, write_mean
    from vitviz.pipeline.compare import Comparison

    items, members, owner = [], set(), []
    for j, (stem, images, mean) in enumerate(jobs):
        for p in images:
            if mean:
                members.add(len(items))
            items.append(ImageItem(len(items), str(p), stem))
            owner.append(j)
    tally = _Tally()
    results: list[list[Any]] = [[] for _ in jobs]
    written = 0
    with _start(args, "compare", TASK_IMAGES) as run:
        say(f"vitviz-cli: comparing {len(items)} images on Ray ({run.workers} workers)")
        for o in run.outcomes(CompareJob(args, frozenset(members)), items):
            if not tally.note(o):
                continue
            assert o.record is not None
            if o.index not in members:
                written += 1
                continue
            arrays = {k: np.asarray(v, np.float64) for k, v in o.record["comparison"].items()}
            results[owner[o.index]].append(Comparison(**arrays))
    for j, (stem, _, mean) in enumerate(jobs):
        if mean:
            written += write_mean(class_names, stem, results[j], args.out)
    return exit_status(written, len(tally.failed))
