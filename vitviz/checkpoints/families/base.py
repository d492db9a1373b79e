"""What a family converter gets (Source), what it hands back (Conversion), and the registry entry.

A converter turns a foreign state dict into the state dict and model config of one of vitviz's
kinds (a ViTConfig for the generic layouts; the kind's own config for a kind's families).
It renames (no copy), reshapes (views) and fuses q/k/v (the one necessary copy, freeing the
originals as it goes), and says in ``notes`` what it assumed or dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import Tensor

from vitviz.checkpoints.folders import NO_PROCESSOR
from vitviz.checkpoints.library_check import Reference
from vitviz.imaging import Preprocessing
from vitviz.kindapi.sides import ModelConfig


@dataclass
class Source:
    """A checkpoint as read, plus what came beside it and what the user said about it."""

    state: dict[str, Tensor]  # unwrapped tensors; converters pop what they use
    path: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # non-tensor entries of a .pth dict
    metadata: dict[str, str] = field(default_factory=dict)  # safetensors header metadata
    folder_config: dict[str, Any] | None = None  # config.json beside the weights (HF or timm)
    preprocessor: dict[str, Any] | None = None  # the HF image processor's settings
    # where ``preprocessor`` came from, or what was found instead (folders.read_image_processor)
    preprocessor_found: str = NO_PROCESSOR
    user: dict[str, Any] = field(default_factory=dict)  # sidecar / --config / config=
    # where folder_config came from when not config.json: a training checkpoint's own entries
    # ("the 'args' entry of the training checkpoint") or "args.yaml beside it"
    config_from: str | None = None

    @property
    def name(self) -> str:
        """The file (or folder) name used in messages."""
        return self.path.name if self.path is not None else "This checkpoint"

    @property
    def sidecar_name(self) -> str:
        return f"{self.path.name if self.path is not None else 'checkpoint'}.vitviz.json"

    @property
    def hf_config(self) -> dict[str, Any] | None:
        """config.json of a Hugging Face transformers folder (it has ``model_type``)."""
        cfg = self.folder_config
        return cfg if isinstance(cfg, dict) and "model_type" in cfg else None

    @property
    def timm_config(self) -> dict[str, Any] | None:
        """config.json written by timm (``architecture`` + ``pretrained_cfg``)."""
        cfg = self.folder_config
        if isinstance(cfg, dict) and "architecture" in cfg and "model_type" not in cfg:
            return cfg
        return None


@dataclass
class Conversion:
    """A model's config and state dict, with what the checkpoint said around them. ``kind``:
    the model kind (``vitviz.kinds``) whose ``build_from_state`` makes the model."""

    family: str
    config: ModelConfig
    state: dict[str, Tensor]
    class_names: list[str]
    preprocessing: Preprocessing
    notes: list[str] = field(default_factory=list)
    reference: Reference | None = None  # the library architecture it claims to be
    kind: str = "vit"  # the generic layouts are the ViT's
    assumed: dict[str, Any] = field(default_factory=dict)  # settings from a convention


@dataclass(frozen=True)
class FamilyInfo:
    """What a family is, in the words of the families table (``vitviz-cli families``, Help ▸
    Supported checkpoints, docs/checkpoints.md): who made such checkpoints, the names they go by,
    the forms vitviz reads, and the parts of vitviz's model they map onto."""

    label: str  # "timm BEiT, BEiT v2"
    names: str  # "beit_*, beitv2_*"
    forms: str  # "state dict (.pth, .safetensors); timm folder"
    parts: tuple[str, ...]  # ("relative position bias per layer and head", "LayerScale", ...)


@dataclass(frozen=True)
class Family:
    """One registry entry: recognised by ``detect`` (key names), turned into the one model by
    ``convert``; ``info`` describes it in the families table."""

    name: str
    detect: Callable[[Source], bool]
    convert: Callable[[Source], Conversion]
    info: FamilyInfo | None = None
    # the architecture names it can build without its library (a training checkpoint's
    # ``model`` name, e.g. a table of timm's names), None: none
    knows_name: Callable[[str], bool] | None = None
