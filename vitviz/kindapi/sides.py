"""What a kind declares for loading, model code and training: the types of those protocol members.

Torch-free, like the registry: the window's Training tab and the CLI's parser read a kind's
training fields, and the model-code settings dialog its settings, before torch loads. A kind's
heavy work (building a network, probing one) is in the methods, which import torch when called.

- ``ModelConfig``: what the shared code reads of a kind's model config (a ``ViTConfig``,
  a ``SwinConfig``): sizes, classes, and a JSON dict (the native file's metadata);
- ``ModelCodeSide``: how a kind opens a module from a user's file that it recognises (a Swin's
  window-attention modules), and the model-code settings it reads (``swin_windows``);
- ``TrainingField`` / ``TrainingSide``: the settings a kind adds to a training run (one
  ``TrainConfig`` field, CLI option and form row each), its presets, its checks, the network a
  run builds and the maps a run draws of it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import numpy as np
    from torch import Tensor, nn

# A training setting's value: what a TrainConfig field holds and a config.json stores.
SettingValue = int | float | str | bool | tuple[int, ...] | None


# -- loading ---------------------------------------------------------------------------------------
class ModelConfig(Protocol):
    """A kind's model config as the shared code reads it (``ViTConfig``, ``SwinConfig``):
    ``patch_size`` is the side in pixels of its finest tokens (a Swin's first stage)."""

    image_size: tuple[int, int]
    patch_size: int
    in_channels: int
    num_classes: int

    def to_dict(self) -> dict[str, object]:
        """JSON-ready fields; the kind's ``config_from_dict`` reads them back."""
        ...


# -- model code ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CodeModelRequest:
    """What vitviz.modelcode found of a user's module before a kind wraps it.

    ``image_size`` (H, W) and ``in_channels`` of its input, ``patch_size`` (from
    ``patch_source``), ``target`` ('FILE.py:NAME') and the model-code ``settings`` the kind
    declared that the user gave (checked by its ``parse_setting``)."""

    image_size: tuple[int, int]
    patch_size: int
    patch_source: str
    in_channels: int
    target: str
    settings: Mapping[str, object]


class ModelCodeSide(Protocol):
    """A kind's way to open a module from a user's file that it recognises."""

    settings: tuple[str, ...]  # the model-code settings it reads, e.g. ("swin_windows",)

    def parse_setting(self, name: str, value: object) -> object:
        """The checked value of one of its ``settings``; ValueError (a plain sentence) when it
        can't be."""
        ...

    def claims(self, model: nn.Module) -> bool:
        """``model`` (the user's module) is one this kind opens (its attention is its kind's)."""
        ...

    def wrap(self, inner: nn.Module, request: CodeModelRequest) -> tuple[nn.Module, str]:
        """``inner`` wrapped as a model of this kind (after one probing forward pass), and a
        note saying what was found."""
        ...


# -- training --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TrainingField:
    """A setting a kind adds to a training run: a ``TrainConfig`` field (and config.json key),
    a ``vitviz-cli train`` option and a row of the Training tab's model group.

    ``editor``: the row's widget: "int" (a spin box over ``limits`` (low, high, step)), "ints"
    (per-stage numbers typed as '48,96,192'), "float" (``limits`` and ``decimals``) or "choice"
    (``choices``). ``more``: under the group's "more settings". ``flag`` None: no CLI option.
    """

    name: str
    default: SettingValue
    label: str
    editor: str = "int"
    limits: tuple[float, float, float] = (1, 1024, 1)
    decimals: int = 2
    choices: tuple[str, ...] = ()
    more: bool = False
    flag: str | None = None
    help: str = ""


class TrainSettings(Protocol):
    """A training run's settings as a kind reads them (a ``vitviz.training.TrainConfig``): the
    shared ones, and the kinds' own fields as attributes."""

    image_size: int
    patch_size: int
    mlp_ratio: float
    drop_path_rate: float
    in_channels: int | None
    model: str

    def __getattr__(self, name: str) -> SettingValue: ...


class TrainingSide(Protocol):
    """A kind's training: its settings, presets and checks (torch-free), and the network a run
    builds and the maps it draws (those import torch)."""

    fields: tuple[TrainingField, ...]  # its settings, in the order of the form and the CLI
    presets: Mapping[str, Mapping[str, SettingValue]]  # name -> TrainConfig fields
    preset_labels: Mapping[str, str]  # name -> what the Training tab's preset list says
    keeps_preset_on_dataset: bool  # choosing a data set keeps its preset (a Swin's stays)

    def model_kwargs(
        self, cfg: TrainSettings, num_classes: int, in_channels: int
    ) -> dict[str, SettingValue]:
        """Keyword arguments of its model config for the run ``cfg`` (``in_channels``: what the
        data turned out to have when ``cfg`` leaves it to the data)."""
        ...

    def problems(self, cfg: TrainSettings) -> list[str]:
        """Why ``cfg`` (a TrainConfig of this kind) can't build its network, as sentences."""
        ...

    def build(self, cfg: TrainSettings, num_classes: int, channels: int) -> nn.Module:
        """A freshly initialised network for ``num_classes`` classes of ``channels``-channel
        images."""
        ...

    def probe_maps(self, model: nn.Module, x: Tensor) -> tuple[np.ndarray, np.ndarray, int]:
        """The probe of one normalised image x (1, C, H, W): the rollout (gh, gw) float32 scaled
        to max 1, the last layer's attention map (gh', gw') float32, the predicted class."""
        ...

    def rollout_maps(self, model: nn.Module, x: Tensor) -> tuple[Tensor, Tensor]:
        """Logits (B, classes) and the rollout of each image of a batch (B, gh, gw) over the
        clickable grid, in one forward pass (inference mode is the caller's)."""
        ...


# -- checks a kind's training side shares with the shared ones ----------------------------------
def at_least(problems: list[str], name: str, value: object, low: int) -> None:
    """A whole number ≥ ``low``, else one sentence added to ``problems``."""
    if isinstance(value, bool) or not isinstance(value, int):
        problems.append(f"{name} must be a whole number (got {value!r})")
    elif value < low:
        problems.append(f"{name} must be at least {low} (got {value})")


def in_range(problems: list[str], name: str, value: object, low: float, high: float) -> None:
    """low <= value < high, and finite, else one sentence added to ``problems``."""
    ok = isinstance(value, (int, float)) and math.isfinite(value) and low <= value < high
    if not ok:
        problems.append(f"{name} must be in [{low:g}, {high:g}) (got {value!r})")


def whole_numbers(problems: list[str], name: str, values: object) -> Sequence[int] | None:
    """A non-empty list of whole numbers ≥ 1 (one per stage), else a sentence and None."""
    ok = isinstance(values, (tuple, list)) and len(values) > 0
    if not ok or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        problems.append(f"{name} must be a list of whole numbers, one per stage")
        return None
    if min(values) < 1:
        problems.append(f"{name} must all be at least 1 (got {list(values)})")
        return None
    return values
