"""Faithfulness over a folder for the window: the Faithfulness panel's "Over a folder…", the
shown method against ``random`` on every image of a folder, here (a copy of the model opened on
the thread) or on a Ray cluster given in the settings (DESIGN §7). Each image is measured by the
``faithfulness`` command's own job (``FaithfulnessJob`` with its ``measure_image``) on either
engine, and the records are reduced in the images' order into the mean curves and AUCs that the
command's summary gives. Qt-free but for the runner."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vitviz.core.errors import VitvizError
from vitviz.workers.folder_images import folder_images
from vitviz.workers.folder_stats import FolderStatsRunner, RunCancelledError, cluster_errors
from vitviz.workers.messages import CurvesResult

BASELINE = "random"
IMAGES_PER_TASK = 2  # each image is 2 × (steps + 1) forward passes per method


@dataclass(frozen=True)
class FolderFaithfulnessResult:
    """The shown method's and random's curves averaged over a folder's images: ``curves``
    {name: mean p_0 … p_S and mean AUCs; ``mass_in_mask`` the mean over the masked images},
    ``pointing`` {name: hit rate over the masked images}, ``masked`` images with a mask."""

    folder: Path
    checkpoint: str
    method: str
    steps: int
    images: int
    failed: tuple[str, ...]  # "file: why" of the images that could not be measured
    curves: dict[str, CurvesResult]
    pointing: dict[str, float]
    masked: int = 0
    on_cluster: str | None = None  # the cluster's address; None: this computer


def folder_faithfulness_job(
    checkpoint: Path,
    folder: Path,
    progress: Callable[[int, int], None],
    cancelled: Callable[[], bool],
    method: str = "rollout",
    params: dict[str, Any] | None = None,
    steps: int = 20,
    preprocessing: dict[str, Any] | None = None,
    device: str = "cpu",
    address: str | None = None,
    gpus_per_worker: float = 0.0,
) -> FolderFaithfulnessResult:
    """Deletion and insertion curves of ``method`` (with ``params``) and of ``random`` on every
    image of ``folder`` (a ``<stem>_mask.png`` beside an image: the localisation numbers too),
    averaged; ``progress(done, total)`` after each image in order, RunCancelledError as soon as
    ``cancelled()`` says so; VitvizError (one line) when no image can be measured. ``address``:
    a Ray cluster's to measure on (``gpus_per_worker`` each worker reserves); None: here, on
    ``device``."""
    from vitviz.cli.faithfulness import measure_image
    from vitviz.cli.on_ray import FaithfulnessJob, image_items
    from vitviz.explain.faithfulness import DEFAULT_BATCH
    from vitviz.workers.folder_stats_ray import WindowModel, run_on_cluster

    images = folder_images(folder)
    names = list(dict.fromkeys([method, BASELINE]))
    args = argparse.Namespace(steps=steps, batch_size=DEFAULT_BATCH, masks=None, target_class=None)
    job = FaithfulnessJob(args, names, {method: dict(params or {})}, measure_image,
                          WindowModel(checkpoint, preprocessing))  # fmt: skip
    records: list[dict[str, Any]] = []
    failed: list[str] = []

    def each(o: Any) -> None:
        if o.error is not None:
            name = Path(o.path).name  # "file: why" (the reason may name the file itself)
            failed.append(o.error if name in o.error else f"{name}: {o.error}")
        else:
            records.append(o.record)
        if cancelled():
            raise RunCancelledError
        progress(o.index + 1, len(images))

    if cancelled():
        raise RunCancelledError
    if address:
        with cluster_errors(address):
            run_on_cluster("faithfulness", job, images, address, each, methods=names,
                           gpus_per_worker=gpus_per_worker,
                           images_per_task=IMAGES_PER_TASK)  # fmt: skip
    else:
        loaded = _open_here(checkpoint, preprocessing, device)
        for item in image_items(images):
            each(job.run(loaded, [item])[0])
    if not records:
        why = f": {failed[0]}" if failed else ""
        n = len(images)
        raise VitvizError(f"none of the {n} images of {folder.name} could be measured{why}")
    return _reduce(records, failed, folder, checkpoint, method, steps, address)


def _open_here(checkpoint: Path, preprocessing: dict[str, Any] | None, device: str) -> Any:
    """The window's model opened in this process on ``device`` (one line if it can't be)."""
    from vitviz.checkpoints import CheckpointError
    from vitviz.workers.folder_stats_ray import WindowModel

    try:
        return WindowModel(checkpoint, preprocessing, device)()
    except CheckpointError as exc:
        raise VitvizError(str(exc)) from exc


def _reduce(
    records: list[dict[str, Any]],
    failed: list[str],
    folder: Path,
    checkpoint: Path,
    method: str,
    steps: int,
    address: str | None,
) -> FolderFaithfulnessResult:
    """The images' records (in their order) reduced as the command's summary reduces them."""
    from vitviz.cli.faithfulness import mean_curves
    from vitviz.cli.on_ray import faithfulness_from_record
    from vitviz.explain.faithfulness import summary

    results = [faithfulness_from_record(r) for r in records]
    table = summary(results)
    curves, pointing = {}, {}
    for name, s in table.items():
        deletion, insertion = mean_curves(results, name)
        curves[name] = CurvesResult(
            deletion=tuple(deletion),
            insertion=tuple(insertion),
            deletion_auc=s["deletion_auc"],
            insertion_auc=s["insertion_auc"],
            mass_in_mask=s.get("mass_in_mask"),
        )
        if "pointing_game" in s:
            pointing[name] = s["pointing_game"]
    masked = max((s.get("masked_images", 0) for s in table.values()), default=0)
    return FolderFaithfulnessResult(
        folder=folder,
        checkpoint=checkpoint.name,
        method=method,
        steps=steps,
        images=len(results),
        failed=tuple(failed),
        curves=curves,
        pointing=pointing,
        masked=masked,
        on_cluster=address,
    )


class FolderFaithfulnessRunner(FolderStatsRunner):
    """Runs ``folder_faithfulness_job`` on a thread, with the signals of ``FolderStatsRunner``
    (``finished`` carries a FolderFaithfulnessResult)."""

    job = staticmethod(folder_faithfulness_job)
