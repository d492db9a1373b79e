"""What an engine runs: an ``ImageJob`` opens its model once per worker and turns a batch of
``ImageItem`` into one ``Outcome`` each (DESIGN §7). The job is the one place a command's
per-image work is written; every engine calls it, so the files are the same whichever ran."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class ImageItem:
    """One input: its position in the run (the reduction's order), its path and output stem."""

    index: int
    path: str
    stem: str


@dataclass
class Outcome:
    """One image's result: a small JSON-able ``record`` (what the reduction and the table
    need; never a map), or the one-line ``error`` that stopped it."""

    index: int
    path: str
    record: dict[str, Any] | None = None
    error: str | None = None
    worker: int = 0  # the process id of the worker that made it (0: the driver)
    finished: float = field(default_factory=time.time)  # when it was made (the epoch, s)

    def to_json(self) -> str:
        return json.dumps(
            {"index": self.index, "path": self.path, "record": self.record,
             "error": self.error, "worker": self.worker, "finished": self.finished}
        )  # fmt: skip

    @classmethod
    def from_json(cls, text: str) -> Outcome:
        d = json.loads(text)
        return cls(
            int(d["index"]), str(d["path"]), d["record"], d["error"], int(d["worker"]),
            float(d["finished"]),
        )  # fmt: skip


class ImageJob(Protocol):
    """A command's per-image work, picklable (it travels to the workers)."""

    def open(self) -> Any:
        """The worker's state (its model, on its device); called once per worker."""
        ...

    def run(self, state: Any, items: list[ImageItem]) -> list[Outcome]:
        """One Outcome per item, in the items' order; an image that fails has its error."""
        ...

    def complete(self, item: ImageItem, record: dict[str, Any] | None) -> bool:
        """Whether the item is done (``--resume`` skips it): its files all written, or its
        ``record`` (from the previous run's table; None: none there) all it needs."""
        ...
