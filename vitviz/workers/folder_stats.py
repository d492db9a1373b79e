"""Head statistics over a folder for the window: a plain job function (tested without threads)
and a runner that does it on a thread of its own, with progress and cancel.

The job opens its own copy of the model from the checkpoint file, so the viewer's engine stays
free for the image on screen while a folder is measured.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PySide6.QtCore import QObject, Signal

from vitviz.core.errors import VitvizError
from vitviz.workers.cancellable_thread import CancellableThread
from vitviz.workers.folder_images import folder_images


class RunCancelledError(Exception):
    """The user cancelled the run."""


@dataclass(frozen=True)
class FolderStatsResult:
    """Mean and standard deviation over the images of the per-image (L, H) statistics."""

    folder: Path
    checkpoint: str
    images: int
    failed: tuple[str, ...]  # "file: why" of the images that could not be analysed
    distance: np.ndarray  # (L, H) mean attention distance, pixels of the model input
    entropy: np.ndarray  # (L, H) nats
    prefix_share: np.ndarray  # (L, H) fraction
    distance_std: np.ndarray
    entropy_std: np.ndarray
    prefix_share_std: np.ndarray


def folder_stats_job(
    checkpoint: Path,
    folder: Path,
    progress: Callable[[int, int], None],
    cancelled: Callable[[], bool],
    preprocessing: dict[str, Any] | None = None,
    device: str = "cpu",
    address: str | None = None,
    gpus_per_worker: float = 0.0,
) -> FolderStatsResult:
    """Analyse every image of ``folder`` with the model in ``checkpoint`` (no gradients) and
    average its head statistics; ``progress(done, total)`` after each image, RunCancelledError
    as soon as ``cancelled()`` says so; VitvizError (one line) when nothing can be measured.
    ``address``: a Ray cluster's (``auto``, ``ray://host:port``) to measure the images on, its
    actors on their own devices, each reserving ``gpus_per_worker`` (DESIGN §7); None: this
    process, on ``device``."""
    from vitviz.checkpoints import CheckpointError, load_checkpoint
    from vitviz.imaging import Preprocessing
    from vitviz.pipeline.folder_stats import folder_statistics

    images = folder_images(folder)
    try:
        loaded = load_checkpoint(checkpoint)
    except CheckpointError as exc:
        raise VitvizError(str(exc)) from exc
    prep = None if preprocessing is None else Preprocessing.from_dict(preprocessing)

    def step(done: int, total: int, _path: Path, _error: str | None) -> None:
        if cancelled():
            raise RunCancelledError
        progress(done, total)

    if cancelled():
        raise RunCancelledError
    if address:
        from vitviz.workers.folder_stats_ray import folder_statistics_on_ray

        with cluster_errors(address):
            stats = folder_statistics_on_ray(
                checkpoint, images, address, step, preprocessing, gpus_per_worker
            )
    else:
        stats = folder_statistics(
            loaded, images, checkpoint.name, progress=step, device=device, preprocessing=prep
        )
    if stats.images == 0:
        raise VitvizError(f"none of the {len(images)} images of {folder.name} could be analysed")
    m = stats.moments
    return FolderStatsResult(
        folder=folder,
        checkpoint=checkpoint.name,
        images=stats.images,
        failed=tuple(stats.failed),
        distance=stats.mean("distance"),
        entropy=stats.mean("entropy"),
        prefix_share=stats.mean("prefix_share"),
        distance_std=m["distance"].std,
        entropy_std=m["entropy"].std,
        prefix_share_std=m["prefix_share"].std,
    )


@contextlib.contextmanager
def cluster_errors(address: str) -> Iterator[None]:
    """Ray's own errors (an unreachable cluster, ...) as one VitvizError line naming the
    cluster; the user's Cancel and vitviz's own errors as they are."""
    try:
        yield
    except (RunCancelledError, VitvizError):
        raise
    except Exception as exc:  # any of Ray's (an unreachable cluster, ...), said in one line
        raise VitvizError(f"the cluster at {address}: {' '.join(str(exc).split())}") from exc


class FolderStatsRunner(QObject):
    """Runs ``folder_stats_job`` on a thread; one run at a time. Signals arrive on the GUI
    thread: ``progress(done, total)``, then one of ``finished(result)``, ``failed(message)``,
    ``cancelled()``."""

    progress = Signal(int, int)
    finished = Signal(object)  # FolderStatsResult
    failed = Signal(str)
    cancelled = Signal()
    # the job run on the thread: job(checkpoint, folder, progress, cancelled, **options)
    job: Callable[..., Any] = staticmethod(folder_stats_job)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._worker = CancellableThread(
            "vitviz-folder-stats", "a folder is being measured already"
        )

    def is_running(self) -> bool:
        return self._worker.is_running()

    def start(self, checkpoint: Path, folder: Path, **options: Any) -> None:
        self._worker.start(self._run, checkpoint, folder, options)

    def cancel(self) -> None:
        self._worker.cancel()

    def wait(self, timeout: float | None = None) -> None:
        self._worker.wait(timeout)

    def _run(self, checkpoint: Path, folder: Path, options: dict[str, Any]) -> None:
        try:
            result = self.job(
                checkpoint, folder, self.progress.emit, self._worker.cancelled, **options
            )
        except RunCancelledError:
            self.cancelled.emit()
        except (VitvizError, MemoryError) as exc:
            self.failed.emit(str(exc) or type(exc).__name__)
        else:
            self.finished.emit(result)
