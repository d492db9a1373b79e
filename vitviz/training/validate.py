"""Refuse training settings that can't work, before anything starts (DESIGN §8).

Torch is imported only to check that an asked-for GPU exists.
"""

from __future__ import annotations

import math
from pathlib import Path

from vitviz.core.errors import VitvizError
from vitviz.imaging.preprocess import IMAGE_CHANNELS
from vitviz.kindapi.sides import at_least as _at_least
from vitviz.kindapi.sides import in_range as _in_range
from vitviz.training.cifar import missing_cifar_files
from vitviz.training.config import (
    AMP_MODES,
    COMPILE_MODES,
    TrainConfig,
    parse_dataset,
    training_side,
)
from vitviz.training.folder import scan_image_folder

DEVICE_CHOICES = ("auto", "cpu", "cuda", "mps")
RUN_FILES = ("config.json", "metrics.jsonl", "last.safetensors", "best.safetensors")


class TrainingConfigError(VitvizError):
    """Settings that can't work; ``problems`` lists each one as a plain sentence."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("Can't start training: " + "; ".join(self.problems) + ".")


def _model_problems(cfg: TrainConfig) -> list[str]:
    """The kind's checks of its network (``TrainingSide.problems``), then the shared settings."""
    try:
        problems = training_side(cfg.model).problems(cfg)
    except ValueError as exc:  # no kind of that name trains
        problems = [str(exc)]
    c = cfg.in_channels
    if c is not None and (isinstance(c, bool) or not isinstance(c, int) or c not in IMAGE_CHANNELS):
        problems.append(
            f"in_channels must be 1 (grayscale) or 3 (RGB), or left to the data "
            f"(got {cfg.in_channels!r})"
        )
    if not (isinstance(cfg.mlp_ratio, (int, float)) and cfg.mlp_ratio > 0):
        problems.append(f"mlp_ratio must be greater than 0 (got {cfg.mlp_ratio!r})")
    _in_range(problems, "drop_path_rate", cfg.drop_path_rate, 0.0, 1.0)
    return problems


def _optim_problems(cfg: TrainConfig) -> list[str]:
    problems: list[str] = []
    _at_least(problems, "epochs", cfg.epochs, 1)
    _at_least(problems, "batch size", cfg.batch_size, 1)
    if not (isinstance(cfg.lr, (int, float)) and math.isfinite(cfg.lr) and cfg.lr > 0):
        problems.append(f"learning rate must be greater than 0 (got {cfg.lr!r})")
    elif not (isinstance(cfg.min_lr, (int, float)) and 0 <= cfg.min_lr <= cfg.lr):
        problems.append(f"min_lr must be in [0, lr] (got {cfg.min_lr!r})")
    _in_range(problems, "warmup_epochs", cfg.warmup_epochs, 0.0, math.inf)
    _in_range(problems, "weight_decay", cfg.weight_decay, 0.0, math.inf)
    _in_range(problems, "label_smoothing", cfg.label_smoothing, 0.0, 1.0)
    _in_range(problems, "grad_clip", cfg.grad_clip, 0.0, math.inf)
    _in_range(problems, "step_report_interval_s", cfg.step_report_interval_s, 0.0, math.inf)
    if cfg.amp not in AMP_MODES:
        problems.append(f"amp must be one of {', '.join(AMP_MODES)} (got {cfg.amp!r})")
    if cfg.compile not in COMPILE_MODES:
        problems.append(f"compile must be one of {', '.join(COMPILE_MODES)} (got {cfg.compile!r})")
    if cfg.threads is not None:
        _at_least(problems, "threads", cfg.threads, 1)
    return problems


def _data_problems(cfg: TrainConfig) -> list[str]:
    problems: list[str] = []
    try:
        spec = parse_dataset(cfg.dataset)
    except ValueError as exc:
        return [str(exc)]
    for name in ("train_size", "val_size"):
        if getattr(cfg, name) is not None:
            _at_least(problems, name.replace("_", " "), getattr(cfg, name), 1)
    if cfg.crop_padding is not None:
        _at_least(problems, "crop padding", cfg.crop_padding, 0)
    if spec.kind == "folder":
        _in_range(problems, "val_fraction", cfg.val_fraction, 1e-9, 1.0)
        problems += scan_image_folder(spec.path or "")[1]
    elif spec.kind == "cifar10":
        missing = missing_cifar_files(spec.path or "")
        if missing:
            problems.append(
                f"{spec.path} is not a CIFAR-10 python batches folder (cifar-10-batches-py): "
                f"missing {', '.join(missing)}"
            )
    return problems


def _device_problems(cfg: TrainConfig) -> list[str]:
    name = (cfg.device or "auto").strip().lower()
    if name.split(":")[0] not in DEVICE_CHOICES:
        return [f"unknown device {cfg.device!r}; use one of {', '.join(DEVICE_CHOICES)}"]
    if name in ("auto", "cpu"):
        return []
    from vitviz.core.devices import resolve_device  # imports torch: only for a GPU request

    try:
        resolve_device(name)
    except ValueError as exc:
        return [str(exc)]
    return []


def _out_dir_problems(cfg: TrainConfig) -> list[str]:
    if not cfg.out_dir:
        return []
    out = Path(cfg.out_dir).expanduser()
    if out.exists() and not out.is_dir():
        return [f"output {out} exists and is not a folder"]
    taken = [name for name in RUN_FILES if (out / name).exists()]
    if taken:
        return [f"output folder {out} already holds a run ({', '.join(taken)}); choose another"]
    return []


def validate_training_config(cfg: TrainConfig) -> list[str]:
    """Every reason ``cfg`` can't train, as plain sentences; [] when it can."""
    return (
        _model_problems(cfg)
        + _optim_problems(cfg)
        + _data_problems(cfg)
        + _device_problems(cfg)
        + _out_dir_problems(cfg)
    )


def check_training_config(cfg: TrainConfig) -> None:
    """Raise TrainingConfigError listing every problem of ``cfg``."""
    problems = validate_training_config(cfg)
    if problems:
        raise TrainingConfigError(problems)
