"""LoadedModel: a model ready for analysis, with everything its checkpoint said about it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch import nn

from vitviz.imaging import Preprocessing
from vitviz.kindapi.sides import ModelConfig

if TYPE_CHECKING:
    from vitviz.kindapi import ModelKind


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
    # its kind, resolved once where the model entered vitviz (the loader passes it; DESIGN §3)
    resolved_kind: ModelKind | None = field(default=None, repr=False, compare=False)

    @property
    def kind(self) -> ModelKind:
        """The model's kind, carried: the one the loader resolved, else (a LoadedModel built
        by hand) the registry's answer for its model, asked once."""
        if self.resolved_kind is None:
            from vitviz.kindapi import kind_of

            self.resolved_kind = kind_of(self.model)
        return self.resolved_kind

    @property
    def config(self) -> ModelConfig:
        return self.model.config

    @property
    def name(self) -> str:
        return self.path.name if self.path is not None else self.family

    @property
    def known_name(self) -> str:
        """The name people know it by: a cached model's hub id, a folder's name, else the
        file's; its family for a model built from code (``vitviz.core.model_names``)."""
        from vitviz.core.model_names import known_name

        return known_name(self.path, self.family)

    @property
    def architecture_name(self) -> str:
        """The architecture its folder's config.json names, else its kind's label."""
        from vitviz.core.model_names import architecture_words

        return architecture_words(self.path, self.kind.label)

    @property
    def known_words(self) -> str:
        """Both as the window's title, the PNG titles and the CLI write them
        ("timm/vit_small_patch16_224.augreg_in21k_ft_in1k · vit_small_patch16_224")."""
        from vitviz.core.model_names import name_and_architecture

        return name_and_architecture(self.known_name, self.architecture_name)


def default_class_names(num_classes: int) -> list[str]:
    return [f"class {i}" for i in range(num_classes)]
