"""Head statistics over a folder for the window, on a Ray cluster (DESIGN §7): the window's
"Over a folder…" with a cluster address in its settings. The per-image work is the ``stats``
command's (``iter_kind_analyses`` and the kind's head statistics, ``image_record``), run by the
cluster's actors; the driver (this thread) adds each image's statistics in the images' order,
as ``folder_statistics`` does. Qt-free; Ray is imported only when such a run starts."""

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
    """The window's checkpoint and preprocessing, opened on each actor on ``auto`` (the CPU:
    the window's runs reserve no GPU on the cluster)."""

    checkpoint: Path
    preprocessing: dict[str, Any] | None

    def open(self) -> Any:
        from vitviz.checkpoints import load_checkpoint
        from vitviz.core.devices import resolve_device

        loaded = load_checkpoint(self.checkpoint)
        loaded.model.to(resolve_device("auto")).eval()
        return loaded

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


def folder_statistics_on_ray(
    checkpoint: Path,
    images: Sequence[Path],
    address: str,
    progress: Callable[[int, int, Path, str | None], None],
    preprocessing: dict[str, Any] | None = None,
) -> Any:
    """``FolderStatistics`` of ``images`` measured on the cluster at ``address``;
    ``progress(done, total, path, error)`` after each image, in order (an exception it raises,
    e.g. the user's Cancel, stops the run). run.json and images.parquet go to a temporary
    folder, removed after."""
    from vitviz.cli.on_ray import image_items
    from vitviz.cluster.driver import RayRun
    from vitviz.cluster.ray_engine import RayOptions
    from vitviz.pipeline.folder_stats import FolderStatistics

    stats = FolderStatistics(checkpoint.name)
    job = WindowStatsJob(checkpoint, preprocessing)
    options = RayOptions(address=address, images_per_task=IMAGES_PER_TASK)
    temporary = tempfile.TemporaryDirectory(prefix="vitviz-stats-")
    with temporary as out, RayRun("stats", Path(out), options, lambda _line: None) as run:
        for o in run.outcomes(job, image_items(images)):
            if o.error is not None:
                stats.failed.append(f"{o.path}: {o.error}")
            else:
                assert o.record is not None
                stats.add({k: np.asarray(v, np.float64)
                           for k, v in o.record["statistics"].items()})  # fmt: skip
            progress(o.index + 1, len(images), Path(o.path), o.error)
    return stats
