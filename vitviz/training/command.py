"""``vitviz-cli train``: a training run from the command line, progress on stderr.

Exit status: 0 trained; 2 settings or data that can't work (nothing trained); 130 stopped by
Ctrl-C (the last complete epoch's checkpoints stay). Importing this module does not load torch.
"""

from __future__ import annotations

import argparse
import signal
import threading
import time
from pathlib import Path
from typing import Any

from vitviz.core.console import say as _say
from vitviz.kindapi.sides import TrainingField
from vitviz.training.config import (
    COMPILE_MODES,
    DEFAULT_MODEL,
    KIND_FIELDS,
    MODEL_KINDS,
    PRESET_LABELS,
    PRESETS,
    SIDES,
    TrainConfig,
    preset_config,
)
from vitviz.training.events import Event
from vitviz.training.validate import validate_training_config

EXIT_OK, EXIT_BAD_SETTINGS, EXIT_INTERRUPTED = 0, 2, 130


def _int_list(text: str) -> tuple[int, ...]:
    """'48,96,192' -> (48, 96, 192)."""
    try:
        return tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected whole numbers like 48,96,192, got {text!r}"
        ) from None


_PARSERS: dict[str, Any] = {"int": int, "ints": _int_list, "float": float, "choice": str}


def _kind_option(f: TrainingField) -> tuple[str, str, Any, str]:
    """A kind's training setting as a CLI option (its ``flag``, its editor's parser)."""
    return (f.flag or "", f.name, _PARSERS[f.editor], f.help)


# (flag, TrainConfig field, type, help); each kind's settings after the shared model ones
_OPTIONS: tuple[tuple[str, str, Any, str], ...] = (
    (
        "--model",
        "model",
        str,
        f"the kind of network: {' or '.join(MODEL_KINDS)} (default {DEFAULT_MODEL}; a kind's "
        "preset sets its kind)",
    ),
    ("--epochs", "epochs", int, "passes over the training set (default 10)"),
    ("--image-size", "image_size", int, "input side in pixels (default 32)"),
    ("--patch-size", "patch_size", int, "patch side in pixels (default 8)"),
    *(_kind_option(f) for f in KIND_FIELDS if f.flag),
    (
        "--channels",
        "in_channels",
        int,
        "image channels: 1 (grayscale) or 3 (RGB); default: 1 for a folder of grayscale "
        "images, else 3",
    ),
    ("--batch-size", "batch_size", int, "images per step (default 64)"),
    ("--lr", "lr", float, "peak learning rate of AdamW (default 1e-3)"),
    ("--seed", "seed", int, "seed of initialisation, shuffling, augmentation and data"),
    ("--train-size", "train_size", int, "generated data: how many; otherwise at most this many"),
    ("--val-size", "val_size", int, "validation images (same rule as --train-size)"),
    ("--threads", "threads", int, "CPU threads for torch (default: torch's choice)"),
)


def add_parser(subparsers: Any) -> None:
    """Register ``train`` on the CLI's sub-parsers."""
    p = subparsers.add_parser(
        "train",
        help=f"train a small model ({', '.join(MODEL_KINDS)}) on shapes, random data, an image "
        "folder or CIFAR-10",
        description="Train a small model. Writes OUT/config.json, OUT/metrics.jsonl and the "
        "checkpoints OUT/last.safetensors, OUT/best.safetensors (by validation accuracy) and "
        "OUT/epoch_1.safetensors, which `vitviz-cli explain` opens.",
    )
    p.add_argument(
        "--dataset",
        default="shapes",
        help="shapes | random | folder:PATH (one sub-folder per class, optionally "
        "train/ and val/) | cifar10:PATH (cifar-10-batches-py); default shapes",
    )
    p.add_argument(
        "--preset",
        choices=tuple(PRESETS),
        default=None,
        help="starting settings: "
        + "; ".join(f"{name} ({PRESET_LABELS.get(name, name)})" for name in PRESETS)
        + "; the options below override them (default: the --model kind's first preset: "
        + ", ".join(f"{kind}: {next(iter(side.presets))}" for kind, side in SIDES.items())
        + ")",
    )
    for flag, dest, kind, help_text in _OPTIONS:
        p.add_argument(flag, dest=dest, type=kind, default=None, help=help_text)
    p.add_argument("--device", default=None, help="auto | cpu | cuda | cuda:N | mps")
    p.add_argument(
        "--compile",
        nargs="?",
        const="on",
        choices=COMPILE_MODES,
        default=None,
        help="torch.compile the training step: auto (default: on CUDA only), on (also the "
        "CPU; --compile alone means on) or off; a compile that fails falls back to eager",
    )
    p.add_argument(
        "--no-augment",
        dest="augment",
        action="store_false",
        default=None,
        help="no random crop / flip",
    )
    p.add_argument("--name", default=None, help="run name (the default run folder's suffix)")
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="run folder (default: a new folder under the runs directory)",
    )
    p.set_defaults(func=cmd_train)


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The TrainConfig the arguments ask for (ValueError for an unknown preset/dataset field)."""
    fields = [dest for _, dest, _, _ in _OPTIONS] + ["device", "compile", "augment", "name"]
    overrides = {k: getattr(args, k) for k in fields if getattr(args, k, None) is not None}
    overrides["dataset"] = args.dataset
    if args.out is not None:
        overrides["out_dir"] = str(args.out)
    return preset_config(default_preset(args), step_report_interval_s=2.0, **overrides)


def default_preset(args: argparse.Namespace) -> str:
    """--preset, else the first preset of the --model kind (``train --model swin`` starts from
    the small Swin, not from the ViT's patch 8), else the ViT's tutorial."""
    if args.preset is not None:
        return args.preset
    side = SIDES.get(getattr(args, "model", None) or DEFAULT_MODEL)
    return next(iter(side.presets)) if side is not None and side.presets else "tutorial"


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


def print_event(event: Event) -> None:
    """One progress line on stderr per event worth telling."""
    kind = event.kind
    e: Any = event
    if kind == "started":
        _say(
            f"training on {e.device}: {e.num_train} training / {e.num_val} validation images, "
            f"{len(e.class_names)} classes, {e.num_parameters:,} parameters, {e.epochs} epochs "
            f"of {e.steps_per_epoch} steps -> {e.run_dir}"
        )
    elif kind == "step":
        _say(
            f"  epoch {e.epoch} step {e.step}/{e.total_steps}  loss {e.loss:.3f}  "
            f"{e.images_per_s:,.0f} img/s  ETA {_duration(e.eta_s)}"
        )
    elif kind == "epoch":
        _say(
            f"epoch {e.epoch}/{e.epochs}: train loss {e.train_loss:.3f} acc {e.train_acc:.1%}"
            f" | val loss {e.val_loss:.3f} acc {e.val_acc:.1%} | {e.images_per_s:,.0f} img/s"
            f" | {e.epoch_time_s:.1f} s{'  (best)' if e.is_best else ''}"
        )
    elif kind == "log":
        _say(f"  {e.message}")
    elif kind == "finished":
        _say(f"{e.status}: {e.message}")


def cmd_train(args: argparse.Namespace) -> int:
    try:
        config = config_from_args(args)
    except (TypeError, ValueError) as exc:
        _say(f"vitviz-cli: can't train: {exc}")
        return EXIT_BAD_SETTINGS
    problems = validate_training_config(config)
    if problems:
        for problem in problems:
            _say(f"vitviz-cli: can't train: {problem}")
        return EXIT_BAD_SETTINGS
    from vitviz.training.datasets import DatasetError
    from vitviz.training.loop import run_training

    stop = threading.Event()
    previous = _install_interrupt(stop)
    started = time.perf_counter()
    try:
        result = run_training(config, print_event, stop)
    except DatasetError as exc:
        _say(f"vitviz-cli: can't train on {config.dataset}: {exc}")
        return EXIT_BAD_SETTINGS
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    _say(f"run folder: {result.run_dir} ({_duration(time.perf_counter() - started)})")
    return EXIT_OK if result.status == "completed" else EXIT_INTERRUPTED


def _install_interrupt(stop: threading.Event) -> Any:
    """First Ctrl-C: stop after the current step; a second one: the usual KeyboardInterrupt."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum: int, frame: Any) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()
        _say("stopping after this step (Ctrl-C again to abort at once)")

    return signal.signal(signal.SIGINT, handler)
