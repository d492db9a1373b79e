"""LoadedModel: a model ready for analysis, with everything its checkpoint said about it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import nn

from vitviz.imaging import Preprocessing
from vitviz.kinds.sides import ModelConfig


@dataclass
class LoadedModel:
    model: nn.Module  # in eval mode; of a registered kind (vitviz.kinds), with its ``config``
    class_names: list[str]
    preprocessing: Preprocessing
    family: str  # "vitviz", "torchvision", "timm", ...
    path: Path | None = None
    provenance: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what the conversion did or dropped
    reference: Any = None  # library_check.Reference: the library model it was checked against
    # settings a convention or a named architecture's defaults gave, not the file nor the user
    # ({"heads": 3, "global_pool": "token"}): the window marks them until they are confirmed
    assumed: dict[str, Any] = field(default_factory=dict)

    @property
    def config(self) -> ModelConfig:
        return self.model.config

    @property
    def name(self) -> str:
        return self.path.name if self.path is not None else self.family


def default_class_names(num_classes: int) -> list[str]:
    return [f"class {i}" for i in range(num_classes)]
