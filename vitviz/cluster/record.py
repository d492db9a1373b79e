"""What a run on an engine leaves beside its files: ``run.json`` (engine, workers, counts, the
images that failed and why, time, rate) and ``images.parquet``, one row per image (path, target
class, top-5, per-head statistics, AUCs per method, and the record the reduction read), for
dataset-level analysis with pandas, Polars or DuckDB. Both are written atomically, by
``RunFiles`` for every engine (the local one and Ray's), so they are the same whichever ran."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from vitviz.cluster.job import Outcome

RUN_FILE = "run.json"
NO_TABLE = (
    "vitviz-cli: images.parquet not written: pyarrow is not installed "
    "(pip install 'vitviz[cluster]')"
)
TABLE_FILE = "images.parquet"
STATISTICS = ("distance", "entropy", "prefix_share")
ROW_GROUP = 256  # rows held before they are written to the table


@dataclass
class RunRecord:
    """``run.json``: one run of a command on an engine."""

    command: str
    engine: str
    workers: int
    ray_version: str | None
    images: int = 0  # the run's inputs (× checkpoints for stats)
    computed: int = 0  # analysed in this invocation
    skipped: int = 0  # complete before it (--resume)
    failed: list[dict[str, str]] = field(default_factory=list)  # {"path", "reason"}
    seconds: float = 0.0
    images_per_second: float = 0.0
    interrupted: bool = False

    def write(self, folder: Path) -> Path:
        from vitviz.checkpoints.atomic import atomic_path

        target = folder / RUN_FILE
        with atomic_path(target) as tmp:
            Path(tmp).write_text(json.dumps(asdict(self), indent=2) + "\n", encoding="utf-8")
        return target


def _schema(methods: Sequence[str]) -> Any:
    import pyarrow as pa

    nested = pa.list_(pa.list_(pa.float64()))
    fields = [
        ("path", pa.string()),
        ("checkpoint", pa.string()),
        ("status", pa.string()),  # "ok" | "failed" | "skipped"
        ("error", pa.string()),
        ("target_class", pa.int64()),
        ("top5_classes", pa.list_(pa.int64())),
        ("top5_probs", pa.list_(pa.float64())),
        *((name, nested) for name in STATISTICS),
    ]
    for m in methods:
        fields += [(f"deletion_auc_{m}", pa.float64()), (f"insertion_auc_{m}", pa.float64())]
    fields.append(("record", pa.string()))  # the outcome's record, JSON
    return pa.schema(fields)


def _status(outcome: Outcome) -> str:
    """failed (its error), ok (its numbers), skipped (done before, its numbers not known:
    ``--resume`` found its files but no row of them in the previous table)."""
    if outcome.error is not None:
        return "failed"
    return "ok" if outcome.record else "skipped"


def _text(value: str | None) -> str | None:
    """``value`` as UTF-8 can hold it: a file name's undecodable bytes (``\udce9``, Python's
    surrogate escapes) written as ``\xe9``."""
    if value is None:
        return None
    return value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def table_row(outcome: Outcome, checkpoint: str, methods: Sequence[str]) -> dict[str, Any]:
    """One image's row of ``images.parquet``."""
    r = outcome.record or {}
    top5 = r.get("top5") or []
    stats = r.get("statistics") or {}
    row: dict[str, Any] = {
        "path": _text(outcome.path),
        "checkpoint": _text(checkpoint),
        "status": _status(outcome),
        "error": _text(outcome.error),
        "target_class": r.get("target_class"),
        "top5_classes": [int(c) for c, _ in top5] if top5 else None,
        "top5_probs": [float(p) for _, p in top5] if top5 else None,
        **{name: stats.get(name) for name in STATISTICS},
    }
    curves = (r.get("faithfulness") or {}).get("methods", {})
    for m in methods:
        c = curves.get(m) or {}
        row[f"deletion_auc_{m}"] = c.get("deletion_auc")
        row[f"insertion_auc_{m}"] = c.get("insertion_auc")
    row["record"] = None if outcome.record is None else json.dumps(outcome.record)
    return row


class TableWriter:
    """``images.parquet`` row by row (in row groups), into a temporary file that replaces the
    table on ``close`` (so a table read for ``--resume`` is never half written)."""

    def __init__(self, folder: Path, methods: Sequence[str] = ()) -> None:
        import pyarrow.parquet as pq

        self.target = folder / TABLE_FILE
        self.methods = tuple(methods)
        self.schema = _schema(self.methods)
        self.tmp = folder / f".{TABLE_FILE}.{os.getpid()}.tmp"
        self._writer = pq.ParquetWriter(self.tmp, self.schema)
        self._rows: list[dict[str, Any]] = []
        self.rows = 0

    def add(self, outcome: Outcome, checkpoint: str = "") -> None:
        self._rows.append(table_row(outcome, checkpoint, self.methods))
        if len(self._rows) >= ROW_GROUP:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa

        if self._rows:
            self._writer.write_table(pa.Table.from_pylist(self._rows, schema=self.schema))
            self.rows += len(self._rows)
            self._rows = []

    def close(self) -> Path:
        self._flush()
        self._writer.close()
        os.replace(self.tmp, self.target)
        return self.target

    def discard(self) -> None:
        """No table after all: the temporary file removed."""
        self._writer.close()
        self.tmp.unlink(missing_ok=True)


def previous_records(folder: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """{(checkpoint, path): record} of the images a previous run's table has as done (for
    ``--resume``); {} without a table or with one that can't be read."""
    import pyarrow.parquet as pq

    path = folder / TABLE_FILE
    if not path.is_file():
        return {}
    try:
        table = pq.read_table(path, columns=["path", "checkpoint", "status", "record"])
    except (OSError, ValueError):  # pyarrow's errors derive from these
        return {}
    out = {}
    for row in table.to_pylist():
        if row["status"] == "ok" and row["record"] is not None:
            out[(row["checkpoint"] or "", row["path"])] = json.loads(row["record"])
    return out


def has_pyarrow() -> bool:
    """Whether pyarrow (the table's writer) can be imported."""
    try:
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        return False
    return True


class RunFiles:
    """``run.json`` and ``images.parquet`` of one invocation on any engine: ``add`` each
    image's outcome (in the images' order), ``close`` when the run ends (also when it was
    stopped). Without pyarrow only ``run.json``, and ``say`` gets one line saying so."""

    def __init__(
        self,
        folder: Path,
        record: RunRecord,
        say: Callable[[str], None],
        methods: Sequence[str] = (),
    ) -> None:
        self.folder, self.record = folder, record
        self.table: TableWriter | None = None
        if has_pyarrow():
            self.table = TableWriter(folder, methods)
        else:
            say(NO_TABLE)
        self._t0 = time.perf_counter()
        self.succeeded = 0  # images analysed (or found done) without an error

    def add(self, outcome: Outcome, checkpoint: str = "") -> None:
        if outcome.error is not None:
            self.record.failed.append({"path": outcome.path, "reason": outcome.error})
        else:
            self.succeeded += 1
        if self.table is not None:
            self.table.add(outcome, checkpoint)

    def close(self, interrupted: bool = False) -> None:
        """Both files written; none when the run ended with no image analysed (as it leaves
        no other file: a refused image writes nothing), unless it was stopped (Ctrl+C)."""
        if not interrupted and self.succeeded == 0:
            if self.table is not None:
                self.table.discard()
            return
        r = self.record
        r.interrupted = interrupted
        r.seconds = round(time.perf_counter() - self._t0, 3)
        r.images_per_second = round(r.computed / max(1e-9, r.seconds), 3)
        if self.table is not None:
            self.table.close()
        r.write(self.folder)


class LocalRunFiles(RunFiles):
    """``RunFiles`` of the local engine (this process, one worker, no Ray): ``add`` counts each
    image as computed (the local engine has no ``--resume``)."""

    def __init__(
        self,
        folder: Path,
        command: str,
        say: Callable[[str], None],
        images: int,
        methods: Sequence[str] = (),
    ) -> None:
        super().__init__(folder, RunRecord(command, "local", 1, None, images=images), say, methods)

    def add(self, outcome: Outcome, checkpoint: str = "") -> None:
        self.record.computed += 1
        super().add(outcome, checkpoint)

    def end(self, exc: BaseException | None) -> None:
        """The run ended: completed (``exc`` None) or stopped by Ctrl+C, both files written;
        refused by an error (a bad option found late), nothing left behind."""
        if exc is None or isinstance(exc, KeyboardInterrupt):
            self.close(interrupted=exc is not None)
        elif self.table is not None:
            self.table.discard()

    def __enter__(self) -> LocalRunFiles:
        return self

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        self.end(exc)
