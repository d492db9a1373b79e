"""``vitviz-cli explain`` over many images: folders expanded, forward passes in batches on the
device (``--batch-size``), ``--attention-dtype``, ``--layers``, and the files written by writer
threads while the next batch computes (a bounded queue: at most ``WRITE_QUEUE`` analyses wait;
``writer_threads()`` threads, since zlib and numpy's writes let go of the GIL: one thread's PNGs
and npz took about 0.4 s an image, a GPU computes one in milliseconds).

The files are those of one image at a time: ``<stem>.npz`` and the PNGs of
``vitviz.pipeline.export``.
"""

from __future__ import annotations

import argparse
import os
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from vitviz.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_PARTIAL,
    CliError,
    make_out_folder,
    no_images,
)
from vitviz.cli.output_stems import output_stems
from vitviz.cli.pass_progress import passes_shown
from vitviz.core.console import say

if TYPE_CHECKING:
    import numpy as np

    from vitviz.checkpoints import LoadedModel
    from vitviz.kindapi import KindAnalysis
    from vitviz.pipeline.batch import BatchItem
    from vitviz.pipeline.export import ExplainedMaps, MapSettings

WRITE_QUEUE = 2  # analyses waiting for the writers (each holds its attention)
MAX_WRITERS = 4  # writer threads at most (each holds one analysis while it writes)


def writer_threads() -> int:
    """Writer threads for this machine: one per core beyond the one computing, 1 to 4."""
    return max(1, min(MAX_WRITERS, (os.cpu_count() or 1) - 1))


ATTENTION_DTYPE_NAMES = ("float32", "float16", "bfloat16")

# How a model's own output gives the probability said per image (models from code may return
# probabilities or log-probabilities instead of logits: vitviz.modelcode.outputs).
_SCORES = {
    "probabilities": ", the model's own probability",
    "log-probabilities": ", from the model's log-probability",
}


def add_batch_options(p: argparse.ArgumentParser) -> None:
    """``--batch-size N``, ``--attention-dtype`` and ``--layers`` on a command that analyses
    images (the options that decide how much memory an analysis takes)."""
    p.add_argument(
        "--batch-size",
        type=int,
        default=None,
        metavar="N",
        help="images per forward pass (default: as many as the device's free memory allows)",
    )
    p.add_argument(
        "--attention-dtype",
        choices=ATTENTION_DTYPE_NAMES,
        default="float32",
        help="keep attention in half precision (float16: each probability within 2^-11 "
        "relative, bfloat16: 2^-8) for half the memory; maps are computed in float32",
    )
    p.add_argument(
        "--layers",
        default=None,
        metavar="SPEC",
        help="keep the attention (and gradients) of these layers only, for less memory: 0-based "
        "indices and ranges (9,10,11 or 0-3) or last:K; the npz key 'layers' names them. "
        "Rollout, gradient rollout and relevance need every layer: NaN in the npz, no PNG",
    )


def layers_option(spec: str | None, depth: int) -> tuple[int, ...] | None:
    """``--layers SPEC`` -> the model layers kept (sorted), None for every layer; CliError
    naming the option for a bad spec or a layer out of range."""
    from vitviz.core.layers import LayerSpecError, parse_layers

    try:
        return parse_layers(spec, depth)
    except LayerSpecError as exc:
        raise CliError(f"--layers {spec}: {exc.reason}") from exc


def note_unused_options(args: argparse.Namespace, unused: Mapping[str, str]) -> None:
    """One line on stderr for each option given that the model's kind does not use (the run
    goes on: they change how, not what, is computed)."""
    given = (
        ("batch_size", args.batch_size is not None, f"--batch-size {args.batch_size}"),
        ("attention_dtype", args.attention_dtype != "float32",
         f"--attention-dtype {args.attention_dtype}"),
        ("max_side", args.full_size, "--full-size"),
    )  # fmt: skip
    for option, was_given, text in given:
        if was_given and option in unused:
            say(f"vitviz-cli: note: {text} {unused[option]}")


def expand_images(paths: Sequence[Path]) -> list[Path]:
    """The images of ``paths``: files as given, folders replaced by the images directly in them
    (natural order). CliError for a folder without images. A folder named like an image
    (``cat.png/``) stays as given: the loader refuses it as not an image file."""
    from vitviz.imaging.loading import is_image_path, list_images

    out: list[Path] = []
    for p in paths:
        if p.is_dir() and not is_image_path(p):
            found = list_images(p)
            if not found:
                raise no_images(p)
            out.extend(found)
        else:
            out.append(p)
    return out


@dataclass
class _Writer:
    """Writes each analysis's files on ``threads`` threads of its own; errors are kept for the
    end (in no particular order: each image's files are its own)."""

    out: Path
    colormap: str
    max_side: int | None
    titled: bool = True  # title and colour bar on the map PNGs (False: --bare)
    settings: MapSettings | None = None  # the MapSettings the maps were made with (for the titles)
    threads: int = 1
    jobs: queue.Queue = field(default_factory=lambda: queue.Queue(maxsize=WRITE_QUEUE))
    failed: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.workers = [
            threading.Thread(target=self._loop, name=f"vitviz-writer-{i}", daemon=True)
            for i in range(self.threads)
        ]
        for worker in self.workers:
            worker.start()

    def _loop(self) -> None:
        from vitviz.pipeline.export import write_npz, write_pngs

        while True:
            job = self.jobs.get()
            if job is None:
                return
            analysis, maps, stem, name = job
            try:
                write_npz(analysis, maps, self.out / f"{stem}.npz")
                write_pngs(
                    analysis,
                    maps,
                    self.out,
                    stem,
                    self.colormap,
                    max_side=self.max_side,
                    titled=self.titled,
                    settings=self.settings,
                )
            except OSError as exc:
                self.failed.append(f"vitviz-cli: could not write {name}: {exc.strerror or exc}")
            except Exception as exc:  # noqa: BLE001 - a writer that died would hang the run
                self.failed.append(f"vitviz-cli: could not write {name}: {exc}")
            del analysis, maps, job

    def put(self, analysis: KindAnalysis, maps: ExplainedMaps, stem: str, name: str) -> None:
        self.jobs.put((analysis, maps, stem, name))  # blocks while the queue is full

    def close(self) -> list[str]:
        for _ in self.workers:
            self.jobs.put(None)
        for worker in self.workers:
            worker.join()
        return self.failed


def kept_layers_text(kept: tuple[int, ...], depth: int) -> str:
    """One line: the layers kept and the methods of the table that need the others."""
    from vitviz.core.layers import layers_text
    from vitviz.explain.methods import all_methods

    left_out = [m.name for m in all_methods() if m.layers_missing(kept, depth) is not None]
    text = f"keeping the attention of layers {layers_text(kept)} of {depth}"
    if left_out:
        text += f"; {', '.join(left_out)} need layers not kept (NaN in the npz, no PNG)"
    return text


def fit_joint(
    args: argparse.Namespace,
    loaded: LoadedModel,
    images: Sequence[Path],
    settings: MapSettings,
    analyses_of: Callable[..., Iterator[BatchItem]] | None,
    max_side: int | None,
    dtype: object,
) -> dict[int, np.ndarray]:
    """--joint-pca: the pca map of each image from one fit over all of them (a first pass
    through the model, without gradients: ``vitviz.pipeline.joint_pca``); {} without it."""
    if not getattr(args, "joint_pca", False):
        return {}
    from vitviz.explain.methods import get_method
    from vitviz.pipeline.batch import iter_kind_analyses
    from vitviz.pipeline.joint_pca import JOINT_METHOD, fit_joint_pca

    method = get_method(JOINT_METHOD)
    foreground = method.resolve(settings.params_for(method), strict=False)["foreground"]
    some = f"{len(images)} image" + ("s" if len(images) != 1 else "")
    say(f"vitviz-cli: fitting the {JOINT_METHOD} map over {some} (a first pass)")
    items = (analyses_of or iter_kind_analyses)(
        loaded,
        images,
        batch_size=args.batch_size,
        attention_dtype=dtype,
        gradients=False,
        max_side=max_side,
        layers=getattr(args, "kept_layers", None),
    )
    try:
        return fit_joint_pca(items, float(foreground))
    except ValueError as exc:  # a model whose tokens vitviz can't read
        raise CliError(str(exc)) from exc


def explain_many(
    args: argparse.Namespace,
    loaded: LoadedModel,
    images: Sequence[Path],
    settings: MapSettings,
    analyses_of: Callable[..., Iterator[BatchItem]] | None = None,
) -> int:
    """Analyse ``images`` (``args.images`` expanded) in batches, write each image's files into
    ``--out`` (made here), say the model (its name people know, before the first image
    analysed) and one progress line per image; the exit status of ``vitviz-cli explain``."""
    from vitviz.cli.on_ray import image_record
    from vitviz.cluster.job import Outcome
    from vitviz.cluster.record import LocalRunFiles
    from vitviz.imaging.reduction import OVERLAY_MAX_SIDE
    from vitviz.pipeline.attention_dtype import ATTENTION_DTYPES
    from vitviz.pipeline.batch import iter_kind_analyses
    from vitviz.pipeline.export import compute_maps
    from vitviz.pipeline.joint_pca import joined

    make_out_folder(args.out)
    unused = loaded.kind.unused_options()
    note_unused_options(args, unused)
    max_side = None if args.full_size else OVERLAY_MAX_SIDE
    dtype = ATTENTION_DTYPES[args.attention_dtype]
    if args.attention_dtype != "float32" and "attention_dtype" not in unused:  # stated once
        from vitviz.pipeline.attention_dtype import attention_precision_text

        say(f"vitviz-cli: {attention_precision_text(dtype)}")
    kept = getattr(args, "kept_layers", None)
    if kept is not None:  # what keeping fewer layers leaves out, stated once
        say(f"vitviz-cli: {kept_layers_text(kept, int(loaded.model.config.depth))}")
    has_head = loaded.model.config.num_classes > 0
    scores = _SCORES.get(getattr(loaded.model.config, "outputs", "logits"), "")
    names = output_stems(images)
    writer = _Writer(
        args.out, args.colormap, max_side, not args.bare, settings, threads=writer_threads()
    )
    failed, total, start = 0, len(images), time.perf_counter()
    named = False  # the model's name people know, said once before the first image's line
    files = LocalRunFiles(args.out, "explain", say, total)  # run.json, images.parquet (as Ray's)
    try:
        joint = fit_joint(args, loaded, images, settings, analyses_of, max_side, dtype)
        analyses = (analyses_of or iter_kind_analyses)(  # one per image, in order
            loaded,
            images,
            batch_size=args.batch_size,
            attention_dtype=dtype,
            gradients=has_head,  # from the same pass, planned
            max_side=max_side,
            layers=kept,
        )
        for item in analyses:
            path, stem = images[item.index], names[item.index]
            if item.error is not None:
                say(f"vitviz-cli: skipped {path}: {item.error}")
                files.add(Outcome(item.index, str(path), None, str(item.error)))
                failed += 1
                continue
            analysis = item.analysis
            try:  # on the device; the maps cross to the host
                with passes_shown(path.name):
                    maps = compute_maps(analysis, settings)
            except ValueError as exc:  # e.g. attention.head beyond the chosen layer's heads
                raise CliError(str(exc)) from exc
            writer.put(analysis, joined(maps, joint, item.index), stem, str(path))
            target = maps.target_class if has_head else None
            files.add(Outcome(item.index, str(path), image_record(loaded, analysis, target)))
            if has_head:
                c = analysis.top_class
                said = f"{analysis.class_names[c]} ({float(analysis.probs[c]):.1%}{scores})"
            else:
                said = "no head"
            if not named:  # (a run that ends in one error stays one line)
                some = f"{total} image" + ("s" if total != 1 else "")
                say(f"vitviz-cli: explaining {some} with {loaded.known_words}")
                named = True
            rate = (item.index + 1) / max(1e-9, time.perf_counter() - start)
            say(
                f"[{item.index + 1}/{total}] {path.name}: {said} -> {args.out / stem}.npz "
                f"({rate:.1f} images/s)"
            )
            del analysis, maps, item
    finally:
        errors = writer.close()
        files.end(sys.exc_info()[1])  # written when done or stopped (Ctrl+C), not on an error
    for message in errors:
        say(message)
    failed += len(errors)
    if failed == total:
        return EXIT_FAILED
    return EXIT_PARTIAL if failed else EXIT_OK
