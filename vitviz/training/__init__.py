"""Training small ViTs: datasets (shapes, random, image folder, CIFAR-10), the loop, run records.

The window's Training tab needs only this package's top level:

    problems = validate_training_config(config)       # [] or plain sentences
    handle = start_run(config)                        # child process (spawn)
    for event in handle.poll(): ...                   # from a timer; event.kind says what it is
    handle.cancel()                                   # stops at once; last checkpoint stays
    list_runs(), read_metrics(run_dir)                # the runs list

Config, validation, events, run records and the process handle are torch-free; the loop,
datasets and shapes load torch when first used (attribute access on this package).
"""

from __future__ import annotations

import importlib
from typing import Any

from vitviz.training.config import (
    DATASET_PRESETS,
    PRESETS,
    SHAPES_PRESET,
    DatasetSpec,
    TrainConfig,
    equivalent_command,
    parse_dataset,
    preset_config,
    preset_for_dataset,
)
from vitviz.training.events import (
    CheckpointEvent,
    EpochEvent,
    Event,
    FinishedEvent,
    LogEvent,
    ProbeEvent,
    RunStarted,
    StepEvent,
)
from vitviz.training.process import RunHandle, start_run
from vitviz.training.runs import (
    RunRecord,
    data_dir,
    list_runs,
    read_metrics,
    read_run,
    runs_dir,
)
from vitviz.training.schedule import lr_at
from vitviz.training.validate import (
    TrainingConfigError,
    check_training_config,
    validate_training_config,
)

_LAZY = {
    "run_training": "vitviz.training.loop",
    "RunResult": "vitviz.training.loop",
    "load_dataset": "vitviz.training.datasets",
    "TrainData": "vitviz.training.datasets",
    "DatasetError": "vitviz.training.datasets",
    "make_shapes": "vitviz.training.shapes",
    "SHAPE_NAMES": "vitviz.training.shapes",
    "random_crop_flip": "vitviz.training.augment",
    "evaluate_shapes_checkpoint": "vitviz.training.evaluate",
}

__all__ = [
    "DATASET_PRESETS",
    "PRESETS",
    "SHAPES_PRESET",
    "CheckpointEvent",
    "DatasetSpec",
    "EpochEvent",
    "Event",
    "FinishedEvent",
    "LogEvent",
    "ProbeEvent",
    "RunHandle",
    "RunRecord",
    "RunStarted",
    "StepEvent",
    "TrainConfig",
    "TrainingConfigError",
    "check_training_config",
    "data_dir",
    "equivalent_command",
    "list_runs",
    "lr_at",
    "parse_dataset",
    "preset_config",
    "preset_for_dataset",
    "read_metrics",
    "read_run",
    "runs_dir",
    "start_run",
    "validate_training_config",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'vitviz.training' has no attribute {name!r}")
