"""Events a training run reports: small picklable dataclasses, each with a ``kind``.

They cross the process boundary through a multiprocessing queue, so they hold plain numbers,
strings and small numpy arrays only (no tensors). Epochs and steps are 1-based.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

RunStatus = Literal["completed", "cancelled", "failed"]


@dataclass(frozen=True)
class RunStarted:
    run_dir: str
    epochs: int
    steps_per_epoch: int
    total_steps: int
    class_names: list[str]
    num_train: int
    num_val: int
    device: str
    num_parameters: int
    kind: str = field(default="started", init=False)


@dataclass(frozen=True)
class StepEvent:
    epoch: int
    step: int  # global optimizer step, 1..total_steps
    total_steps: int
    loss: float  # mean training loss over the steps since the previous step event
    lr: float
    images_per_s: float  # over the steps since the previous step event
    elapsed_s: float
    eta_s: float  # until the run ends, validation included
    kind: str = field(default="step", init=False)


@dataclass(frozen=True)
class EpochEvent:
    epoch: int
    epochs: int
    train_loss: float
    train_acc: float  # on the augmented training batches
    val_loss: float
    val_acc: float
    images_per_s: float  # training images per second of this epoch (validation excluded)
    epoch_time_s: float
    eta_s: float
    is_best: bool
    kind: str = field(default="epoch", init=False)


@dataclass(frozen=True)
class ProbeEvent:
    """Where the model looks at a fixed validation image after an epoch."""

    epoch: int
    image: np.ndarray  # (S, S, 3) uint8, the probe image as the model sees it
    rollout: np.ndarray  # (gh, gw) float32, CLS attention rollout, scaled to max 1
    cls_attention: np.ndarray  # (gh, gw) float32, last layer, mean over heads, CLS row
    label: int
    predicted: int
    mask: np.ndarray | None = None  # (S, S) bool object mask where the dataset has one
    kind: str = field(default="probe", init=False)


@dataclass(frozen=True)
class CheckpointEvent:
    epoch: int
    path: str
    best: bool  # True for best.safetensors, False for last.safetensors
    kind: str = field(default="checkpoint", init=False)


@dataclass(frozen=True)
class LogEvent:
    message: str
    kind: str = field(default="log", init=False)


@dataclass(frozen=True)
class FinishedEvent:
    """The last event of a run, whatever happened."""

    status: RunStatus
    run_dir: str
    epochs_done: int
    best_val_acc: float | None
    message: str = ""
    traceback: str = ""  # for an unexpected error: the details a bug report needs
    kind: str = field(default="finished", init=False)


Event = (
    RunStarted | StepEvent | EpochEvent | ProbeEvent | CheckpointEvent | LogEvent | FinishedEvent
)
