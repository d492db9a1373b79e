"""The Ray engine (DESIGN §7): the items as a Ray Data dataset, streamed through a pool of
actors that each open the job's model once and run its per-image work (the files written by
the workers, atomically), and the outcomes (small records, never maps) streamed back to the
driver in the order they finish. A worker that dies is restarted and its batch retried (Ray
Data's actor restarts and task retries); the driver drops an outcome it has already seen.

Ray is imported here only, when a run starts: the local engine never needs it."""

from __future__ import annotations

import contextlib
import logging
import math
import os
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from vitviz.cluster.job import ImageItem, ImageJob, Outcome
from vitviz.core.errors import VitvizError

INSTALL_HINT = "--engine ray needs Ray, which is not installed: pip install 'vitviz[cluster]'"


class RayMissingError(VitvizError):
    """Ray is not installed (the message says how to install it)."""


@dataclass(frozen=True)
class RayOptions:
    """Where and how wide a run goes. ``address``: None starts a local Ray sized to the machine
    (stopped at the end), ``auto`` or ``ray://host:port`` joins a running cluster. ``workers``:
    actors, each holding one model (None: one per ``gpus_per_worker`` share of the cluster's
    GPUs, else one per 4 CPUs). ``images_per_task``: images a worker takes at a time."""

    address: str | None = None
    workers: int | None = None
    gpus_per_worker: float = 0.0
    images_per_task: int = 8


def import_ray() -> Any:
    """The ``ray`` module with ``ray.data``; RayMissingError without it."""
    try:
        import ray
        import ray.data
    except ImportError as exc:
        raise RayMissingError(INSTALL_HINT) from exc
    return ray


def ray_version() -> str:
    return str(import_ray().__version__)


@contextlib.contextmanager
def ray_session(options: RayOptions, say: Callable[[str], None]) -> Iterator[Any]:
    """Ray connected for the run: the session already open in this process as it is, else
    the cluster at ``options.address``, else a local one sized to the machine (stopped after).
    ``say`` gets one line with the dashboard's address when there is one."""
    ray = import_ray()
    if ray.is_initialized():
        yield ray
        return
    kwargs: dict[str, Any] = {
        "log_to_driver": False,  # the workers' own lines stay in Ray's log files
        "configure_logging": True,
        "logging_level": logging.ERROR,  # Ray's notices (token authentication, ...) unsaid,
    }  # its errors said (its C++ core's lines are its own: docs/cluster.md)
    if options.address is None:
        kwargs["num_cpus"] = os.cpu_count() or 1
    context = ray.init(address=options.address, **kwargs)
    try:
        url = getattr(context, "dashboard_url", None)
        if url:
            say(f"Ray dashboard: http://{url}" if "://" not in url else f"Ray dashboard: {url}")
        yield ray
    finally:
        ray.shutdown()


def worker_count(ray: Any, options: RayOptions) -> int:
    """The actors to start: ``options.workers``, else sized to the cluster's resources
    (VitvizError when each asks for more GPUs than the cluster has)."""
    if options.workers is not None:
        return options.workers
    resources = ray.cluster_resources()
    if options.gpus_per_worker > 0:
        gpus = resources.get("GPU", 0)
        if gpus < options.gpus_per_worker:  # no worker could start: said, not waited for
            raise VitvizError(
                f"each worker asks for {options.gpus_per_worker:g} GPU and the cluster has "
                f"{gpus:g}: ask for 0 GPUs per worker to run on its CPUs"
            )
        return max(1, int(gpus // options.gpus_per_worker))
    return max(1, int(resources.get("CPU", 1)) // 4)


class _Worker:
    """One actor of the pool: the job's state opened once, then batch after batch."""

    def __init__(self, job: ImageJob) -> None:
        self.job = job
        self.pid = os.getpid()
        self.state: Any = None
        self.broken: str | None = None  # why the model could not be opened here
        try:
            self.state = job.open()
        except Exception as exc:  # noqa: BLE001  (said for each image; a restart would loop)
            self.broken = f"the worker could not open the model: {_one_line(exc)}"

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        import numpy as np

        items = [
            ImageItem(int(i), str(p), str(s))
            for i, p, s in zip(batch["index"], batch["path"], batch["stem"], strict=True)
        ]
        outcomes = self._run(items)
        for o in outcomes:
            o.worker = self.pid
        return {"outcome": np.array([o.to_json() for o in outcomes], dtype=object)}

    def _run(self, items: list[ImageItem]) -> list[Outcome]:
        """The job's outcomes; where the job fails as a whole, each item alone, so one image
        that breaks the model's code is recorded as failed and the others go on."""
        if self.broken is not None:
            return [Outcome(it.index, it.path, None, self.broken) for it in items]
        try:
            return self.job.run(self.state, items)
        except Exception:  # noqa: BLE001  (retried one by one below, each failure recorded)
            return [self._alone(item) for item in items]

    def _alone(self, item: ImageItem) -> Outcome:
        try:
            return self.job.run(self.state, [item])[0]
        except Exception as exc:  # noqa: BLE001  (one image's failure, recorded in run.json)
            return Outcome(item.index, item.path, None, _one_line(exc))


def _one_line(exc: BaseException) -> str:
    """``Type: message`` on one line."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split()) or '(no message)'}"


def _worker_class(job: ImageJob) -> type:
    """A pool actor's class that carries ``job`` itself (shipped with the class, so the actor
    restarts from it alone, without arguments kept in the object store)."""

    class VitvizWorker(_Worker):
        JOB = job

        def __init__(self) -> None:
            super().__init__(self.JOB)

    return VitvizWorker


@contextlib.contextmanager
def _quiet_ray_data() -> Iterator[None]:
    """Ray Data's own lines (execution started, progress bars off) kept out of the terminal
    while vitviz draws its progress; its warnings of failures still come through."""
    import logging

    logger = logging.getLogger("ray.data")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def run_on_ray(
    ray: Any,
    job: ImageJob,
    items: Sequence[ImageItem],
    options: RayOptions,
    workers: int,
) -> Iterator[Outcome]:
    """The outcome of each item, as the workers finish them (any order; a retried batch may
    repeat one: the caller keeps the first)."""
    if not items:
        return
    with warnings.catch_warnings():  # Ray Data's context warns about its own defaults
        warnings.simplefilter("ignore", DeprecationWarning)
        context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False  # vitviz draws its own (images/s, ETA)
    context.print_on_execution_start = False
    per_task = max(1, options.images_per_task)
    rows = [{"index": it.index, "path": it.path, "stem": it.stem} for it in items]
    blocks = max(1, math.ceil(len(rows) / per_task))
    ds = ray.data.from_items(rows, override_num_blocks=blocks)
    del rows
    remote: dict[str, Any] = {"num_cpus": 1}
    if options.gpus_per_worker > 0:
        remote["num_gpus"] = options.gpus_per_worker
    ds = ds.map_batches(
        _worker_class(job),
        batch_size=per_task,
        compute=ray.data.ActorPoolStrategy(size=min(workers, blocks)),  # no idle actor
        batch_format="numpy",
        **remote,
    )
    with _quiet_ray_data():
        for row in ds.iter_rows():
            yield Outcome.from_json(str(row["outcome"]))
