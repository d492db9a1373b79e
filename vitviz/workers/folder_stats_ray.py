"""The window's folder runs on a Ray cluster (DESIGN §7): "Over a folder…" of the Head
statistics and of the Faithfulness panel with a cluster address in the settings. The per-image
work is the commands' (``stats``: ``iter_kind_analyses`` and the kind's head statistics,
``image_record``; ``faithfulness``: its ``FaithfulnessJob``), run by the cluster's actors; the
driver (this thread) takes each image's record in the images' order (``run_on_cluster``), as
the local run does. Qt-free; Ray is imported only when such a run starts."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vitviz.cluster.job import ImageItem, Outcome

IMAGES_PER_TASK = 8


@dataclass
class WindowStatsJob:
    """The window's checkpoint and preprocessing, opened on each actor (``WindowModel``)."""

    checkpoint: Path
    preprocessing: dict[str, Any] | None

    def open(self) -> Any:
        return WindowModel(self.checkpoint, self.preprocessing)()

    def run(self, loaded: Any, items: list[ImageItem]) -> list[Outcome]:
        from vitviz.cli.on_ray import image_record
        from vitviz.imaging import Preprocessing
        from vitviz.pipeline.batch import iter_kind_analyses

        prep = None if self.preprocessing is None else Preprocessing.from_dict(self.preprocessing)
        out = []
        paths = [Path(it.path) for it in items]
        for b in iter_kind_analyses(loaded, paths, preprocessing=prep):
            it = items[b.index]
            if b.error is not None:
                out.append(Outcome(it.index, it.path, None, str(b.error)))
            else:
                out.append(Outcome(it.index, it.path, image_record(loaded, b.analysis, None)))
        return out

    def complete(self, item: ImageItem, record: dict[str, Any] | None) -> bool:
        return False  # the window always measures the whole folder


@dataclass
class WindowModel:
    """The window's checkpoint with the window's preprocessing, opened on ``device`` (a
    worker's ``auto``: its GPU where the run reserves one, else the CPU); picklable, it travels
    to the actors."""

    checkpoint: Path
    preprocessing: dict[str, Any] | None
    device: str = "auto"

    def __call__(self) -> Any:
        from dataclasses import replace

        from vitviz.checkpoints import load_checkpoint
        from vitviz.core.devices import resolve_device
        from vitviz.imaging import Preprocessing

        loaded = load_checkpoint(self.checkpoint)
        if self.preprocessing is not None:
            loaded = replace(loaded, preprocessing=Preprocessing.from_dict(self.preprocessing))
        loaded.model.to(resolve_device(self.device)).eval()
        return loaded


def run_on_cluster(
    command: str,
    job: Any,
    images: Sequence[Path],
    address: str,
    each: Callable[[Outcome], None],
    *,
    gpus_per_worker: float = 0.0,
    images_per_task: int = IMAGES_PER_TASK,
    methods: Sequence[str] = (),
) -> None:
    """``job`` (an ``ImageJob``) over ``images`` on the cluster at ``address`` (one worker per
    ``gpus_per_worker`` share of its GPUs, else per 4 CPUs); ``each(outcome)`` for each image
    in the images' order (an exception it raises, e.g. the user's Cancel, stops the run).
    run.json and images.parquet go to a temporary folder, removed after."""
    from vitviz.cli.on_ray import image_items
    from vitviz.cluster.driver import RayRun
    from vitviz.cluster.ray_engine import RayOptions

    options = RayOptions(
        address=address, gpus_per_worker=gpus_per_worker, images_per_task=images_per_task
    )
    temporary = tempfile.TemporaryDirectory(prefix=f"vitviz-{command}-")
    with (
        temporary as out,
        RayRun(command, Path(out), options, lambda _: None, methods=methods, progress=False) as run,
    ):
        for o in run.outcomes(job, image_items(images)):
            each(o)


def folder_statistics_on_ray(
    checkpoint: Path,
    images: Sequence[Path],
    address: str,
    progress: Callable[[int, int, Path, str | None], None],
    preprocessing: dict[str, Any] | None = None,
    gpus_per_worker: float = 0.0,
) -> Any:
    """``FolderStatistics`` of ``images`` measured on the cluster at ``address``;
    ``progress(done, total, path, error)`` after each image, in order (an exception it raises,
    e.g. the user's Cancel, stops the run)."""
    from vitviz.pipeline.folder_stats import FolderStatistics

    stats = FolderStatistics(checkpoint.name)

    def each(o: Outcome) -> None:
        if o.error is not None:
            stats.failed.append(f"{o.path}: {o.error}")
        else:
            assert o.record is not None
            stats.add({k: np.asarray(v, np.float64) for k, v in o.record["statistics"].items()})
        progress(o.index + 1, len(images), Path(o.path), o.error)

    job = WindowStatsJob(checkpoint, preprocessing)
    run_on_cluster("stats", job, images, address, each, gpus_per_worker=gpus_per_worker)
    return stats
