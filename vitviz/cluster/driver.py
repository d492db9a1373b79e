"""A command's run on the Ray engine, around its job (DESIGN §7): Ray connected (or started)
for the run, ``--resume``'s skipping, the outcomes handed on in the order of the inputs (the
reductions are then those of the local engine), the progress bar, ``images.parquet`` and
``run.json``, written also when the run is stopped (Ctrl+C), so ``--resume`` continues it."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from vitviz.cluster.job import ImageItem, ImageJob, Outcome
from vitviz.cluster.ordered import InOrder
from vitviz.cluster.progress import RunProgress
from vitviz.cluster.ray_engine import (
    RayOptions,
    import_ray,
    ray_session,
    run_on_ray,
    worker_count,
)
from vitviz.cluster.record import RunFiles, RunRecord, previous_records


class _Nowhere:
    """A stream that keeps nothing (the bar of a run whose caller shows its own progress)."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


def sweep_temporaries(folder: Path, stems: Sequence[str]) -> int:
    """Remove the atomic writers' temporary files (``.<name>.<random>.tmp``) of these outputs
    that a killed worker left behind; how many."""
    prefixes = tuple(f".{s}{sep}" for s in stems for sep in "._")
    removed = 0
    if not prefixes:
        return 0
    for f in folder.iterdir():
        if f.name.endswith(".tmp") and f.name.startswith(prefixes) and f.is_file():
            f.unlink(missing_ok=True)
            removed += 1
    return removed


class RayRun:
    """``with RayRun(...) as run: for outcome in run.outcomes(job, items): ...``: one
    invocation of a command on Ray, its record and table written on the way out."""

    def __init__(
        self,
        command: str,
        out: Path,
        options: RayOptions,
        say: Callable[[str], None],
        *,
        resume: bool = False,
        methods: Sequence[str] = (),
        progress: bool = True,
    ) -> None:
        self.command, self.out, self.options, self.say = command, out, options, say
        self.resume, self.methods = resume, tuple(methods)
        self.progress = progress  # the bar on stderr (False: the caller shows its own)
        self._stack = contextlib.ExitStack()
        self.record: RunRecord | None = None
        self._previous: dict[tuple[str, str], dict[str, Any]] = {}
        self._stems: list[str] = []

    def __enter__(self) -> RayRun:
        import_ray()  # one line saying how to install it, before anything starts
        self._ray = self._stack.enter_context(ray_session(self.options, self.say))
        self.workers = worker_count(self._ray, self.options)
        if self.resume:
            self._previous = previous_records(self.out)
        self.record = RunRecord(self.command, "ray", self.workers, str(self._ray.__version__))
        self._files = RunFiles(self.out, self.record, self.say, self.methods)
        return self

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        try:
            self._files.close(kind is not None and issubclass(kind, KeyboardInterrupt))
            sweep_temporaries(self.out, self._stems)
        finally:
            self._stack.close()

    def _handle(self, o: Outcome, checkpoint: str) -> None:
        self._files.add(o, checkpoint)

    def outcomes(
        self, job: ImageJob, items: Sequence[ImageItem], checkpoint: str = ""
    ) -> Iterator[Outcome]:
        """Each item's outcome in the items' order: a done one's (``--resume``, its record
        from the previous table, or {}) without running it, the others from the workers."""
        assert self.record is not None
        self._stems += [it.stem for it in items]
        todo, done = [], []
        for it in items:
            previous = self._previous.get((checkpoint, it.path))
            if self.resume and job.complete(it, previous):
                done.append(Outcome(it.index, it.path, previous or {}))
            else:
                todo.append(it)
        self.record.images += len(items)
        self.record.skipped += len(done)
        order = InOrder(it.index for it in items)
        label = f"[{checkpoint}] " if checkpoint else ""
        progress = RunProgress(len(todo), label, stream=None if self.progress else _Nowhere())
        if done:
            self.say(f"{label}--resume: {len(done)} of {len(items)} images done before, skipped")
        computed = failed = 0
        try:
            for o in done:
                for ready in order.add(o):
                    self._handle(ready, checkpoint)
                    yield ready
            for o in run_on_ray(self._ray, job, todo, self.options, self.workers):
                if order.seen(o.index):
                    continue  # a repeat (a retried batch): counted once
                computed += 1
                failed += o.error is not None
                self.record.computed += 1
                progress.update(computed, failed)
                for ready in order.add(o):
                    self._handle(ready, checkpoint)
                    yield ready
        finally:
            progress.finish()
            for o in order.drain():  # finished but behind a missing one: kept in the table
                self._handle(o, checkpoint)
        for index in order.missing():
            it = next(i for i in items if i.index == index)
            lost = Outcome(index, it.path, None, "no result came back from the workers")
            self._handle(lost, checkpoint)
            yield lost
