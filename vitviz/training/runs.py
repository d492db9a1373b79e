"""Run folders: where runs live, what each keeps, and reading past runs back.

A run folder holds ``config.json`` (the TrainConfig), ``status.json`` (running / completed /
cancelled / failed), ``metrics.jsonl`` (one JSON object per epoch), ``steps.jsonl`` (the
training loss as each step report gave it), ``probes/epoch_<n>.npz`` (the probe image's
rollout after each epoch) and the checkpoints ``last.safetensors`` and ``best.safetensors``.
Torch-free, so the window can list runs early and show a past run as it was shown live.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vitviz.training.config import TrainConfig

CONFIG_FILE = "config.json"
STATUS_FILE = "status.json"
METRICS_FILE = "metrics.jsonl"
STEPS_FILE = "steps.jsonl"
PROBES_DIR = "probes"
PROBE_KEYS = ("image", "rollout", "cls_attention", "label", "predicted")
LAST_CHECKPOINT = "last.safetensors"
BEST_CHECKPOINT = "best.safetensors"
FIRST_CHECKPOINT = "epoch_1.safetensors"  # epoch 1's weights, to compare with the best
DATA_DIR_ENV = "VITVIZ_DATA_DIR"


def data_dir() -> Path:
    """vitviz's user data folder: $VITVIZ_DATA_DIR, else the platform's per-user data place
    ($XDG_DATA_HOME/vitviz or ~/.local/share/vitviz on Linux)."""
    override = os.environ.get(DATA_DIR_ENV)
    if override:
        return Path(override).expanduser()
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Application Support"
    else:
        xdg = os.environ.get("XDG_DATA_HOME")
        base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "share"
    return base / "vitviz"


def runs_dir() -> Path:
    """Where new runs go by default: data_dir()/runs."""
    return data_dir() / "runs"


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "run"


def new_run_dir(name: str, root: Path | None = None) -> Path:
    """Create and return ``<root>/<YYYYmmdd-HHMMSS>-<name>`` (a numbered suffix if taken)."""
    root = root or runs_dir()
    root.mkdir(parents=True, exist_ok=True)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    base = f"{stamp}-{_slug(name)}"
    for i in range(1000):
        path = root / (base if i == 0 else f"{base}-{i + 1}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise OSError(f"could not create a run folder under {root}")


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically: a temporary file beside it, synced, then renamed over it (the same
    steps as vitviz.checkpoints.atomic, without importing that torch-loading package)."""
    text = json.dumps(data, indent=2, default=str) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def read_json(path: Path) -> Any:
    """Parsed JSON, or None if the file is missing or unreadable."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def prepare_run_dir(config: TrainConfig) -> Path:
    """Create the run folder (``config.out_dir`` or a new one) and write config.json and a
    ``running`` status. ``config.json`` holds the config with ``out_dir`` filled in."""
    if config.out_dir:
        run_dir = Path(config.out_dir).expanduser()
        run_dir.mkdir(parents=True, exist_ok=True)
    else:
        run_dir = new_run_dir(config.run_name)
    write_json(run_dir / CONFIG_FILE, config.replace(out_dir=str(run_dir)).to_dict())
    write_status(run_dir, "running")
    return run_dir


def write_status(run_dir: Path, state: str, **extra: Any) -> None:
    now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    write_json(run_dir / STATUS_FILE, {"state": state, "pid": os.getpid(), "updated": now, **extra})


def append_metrics(run_dir: Path, row: dict[str, Any]) -> None:
    """Append one epoch's metrics as a JSON line (flushed and synced)."""
    with open(run_dir / METRICS_FILE, "a", encoding="utf-8") as f:
        f.write(json.dumps(row, default=float) + "\n")
        f.flush()
        os.fsync(f.fileno())


def append_steps(run_dir: Path, row: dict[str, Any]) -> None:
    """Append one step report ({epoch, step, steps_per_epoch, loss}) as a JSON line (flushed,
    not synced: a killed run loses at most its last reports)."""
    with open(run_dir / STEPS_FILE, "a", encoding="utf-8") as f:
        f.write(json.dumps(row, default=float) + "\n")


def read_steps(run_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The step reports of a run, oldest first (``read_metrics``'s rules)."""
    return read_metrics(run_dir, STEPS_FILE)


def write_probe(run_dir: Path, epoch: int, arrays: dict[str, np.ndarray]) -> Path:
    """Keep one epoch's probe (``PROBE_KEYS``: image (S, S, 3) uint8, rollout and
    cls_attention (gh, gw) float32, label, predicted) as ``probes/epoch_<n>.npz``, atomically."""
    folder = run_dir / PROBES_DIR
    folder.mkdir(exist_ok=True)
    path = folder / f"epoch_{epoch:04d}.npz"
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **{k: np.asarray(arrays[k]) for k in PROBE_KEYS})
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return path


def read_probes(run_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The kept probes of a run, oldest epoch first: dicts of ``epoch`` and ``PROBE_KEYS``
    (arrays; label and predicted as ints). Unreadable files are skipped (no pickle is read)."""
    folder = Path(run_dir) / PROBES_DIR
    out = []
    for path in sorted(folder.glob("epoch_*.npz")) if folder.is_dir() else []:
        try:
            with np.load(path, allow_pickle=False) as data:
                probe = {k: data[k] for k in PROBE_KEYS}
            epoch = int(path.stem.removeprefix("epoch_"))
        except (OSError, ValueError, KeyError):
            continue
        probe.update(epoch=epoch, label=int(probe["label"]), predicted=int(probe["predicted"]))
        out.append(probe)
    return out


def read_metrics(run_dir: str | os.PathLike[str], name: str = METRICS_FILE) -> list[dict[str, Any]]:
    """The per-epoch metrics of a run, oldest first; a torn last line (a killed run) is skipped."""
    path = Path(run_dir) / name
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return []
    rows = []
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def remove_stray_temporaries(run_dir: Path) -> None:
    """Delete the ``.<name>.*.tmp`` files a killed atomic write leaves behind."""
    for tmp in run_dir.glob(".*.tmp"):
        tmp.unlink(missing_ok=True)


def _pid_alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


@dataclass
class RunRecord:
    """A past (or running) run as the runs list shows it."""

    run_dir: Path
    name: str
    config: TrainConfig | None
    status: str  # running | completed | cancelled | failed | interrupted | unknown
    metrics: list[dict[str, Any]] = field(default_factory=list)
    message: str = ""

    @property
    def epochs_done(self) -> int:
        return len(self.metrics)

    @property
    def best_val_acc(self) -> float | None:
        accs = [m["val_acc"] for m in self.metrics if isinstance(m.get("val_acc"), (int, float))]
        return max(accs) if accs else None

    @property
    def last_checkpoint(self) -> Path | None:
        path = self.run_dir / LAST_CHECKPOINT
        return path if path.is_file() else None

    @property
    def best_checkpoint(self) -> Path | None:
        path = self.run_dir / BEST_CHECKPOINT
        return path if path.is_file() else None


def read_run(run_dir: str | os.PathLike[str]) -> RunRecord:
    """Everything a run folder says about its run. A ``running`` run whose process is gone
    is reported as ``interrupted``."""
    path = Path(run_dir)
    raw = read_json(path / CONFIG_FILE)
    try:
        config = TrainConfig.from_dict(raw) if isinstance(raw, dict) else None
    except (TypeError, ValueError):
        config = None
    status = read_json(path / STATUS_FILE)
    state = status.get("state", "unknown") if isinstance(status, dict) else "unknown"
    if state == "running" and not _pid_alive(status.get("pid")):
        state = "interrupted"
    message = status.get("message", "") if isinstance(status, dict) else ""
    return RunRecord(path, path.name, config, state, read_metrics(path), message)


def list_runs(root: str | os.PathLike[str] | None = None) -> list[RunRecord]:
    """Runs under ``root`` (default runs_dir()), newest first; folders without a config.json
    are not runs and are skipped."""
    base = Path(root) if root is not None else runs_dir()
    if not base.is_dir():
        return []
    found = [read_run(d) for d in base.iterdir() if d.is_dir() and (d / CONFIG_FILE).is_file()]
    return sorted(found, key=lambda r: (r.run_dir.stat().st_mtime, r.name), reverse=True)
