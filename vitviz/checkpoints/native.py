"""vitviz's own checkpoint format: one self-describing .safetensors file (DESIGN §4).

Metadata (all JSON strings): ``format`` = "vitviz", ``format_version``, ``model_kind`` (the name
of the model's kind, ``vitviz.kinds``), ``config`` (that kind's model config, e.g. a ViTConfig),
``class_names``, ``preprocessing`` (imaging.Preprocessing), ``provenance`` (how it was made).
A file without ``model_kind`` (written before vitviz had kinds besides the ViT) holds a ViT.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from torch import nn

from vitviz.blocks import VisionTransformer, ViTConfig
from vitviz.checkpoints.assign import assign_exactly
from vitviz.checkpoints.atomic import atomic_path
from vitviz.checkpoints.errors import CheckpointError
from vitviz.checkpoints.loaded import LoadedModel, default_class_names
from vitviz.imaging import Preprocessing
from vitviz.kindapi import get_kind, kind_of
from vitviz.kindapi.sides import ModelConfig

FORMAT_NAME = "vitviz"
FORMAT_VERSION = "1"
UNNAMED_KIND = "vit"  # the kind of a file with no ``model_kind``: every one written before it


def default_preprocessing(config: ModelConfig) -> Preprocessing:
    """Centre crop at the trained size, normalised to [-1, 1]."""
    return Preprocessing(
        image_size=tuple(config.image_size),
        resize="crop",
        crop_pct=1.0,
        mean=(0.5,),
        std=(0.5,),
        interpolation="bicubic",
        channels=config.in_channels,
    )


def save_checkpoint(
    model: nn.Module,
    path: str | os.PathLike[str],
    class_names: Sequence[str] | None = None,
    preprocessing: Preprocessing | None = None,
    provenance: Mapping[str, Any] | None = None,
) -> Path:
    """Write ``model`` (of a registered kind, with its ``config``) to ``path`` atomically in
    the native format; returns the path."""
    config: ModelConfig = model.config
    names = (
        list(class_names) if class_names is not None else default_class_names(config.num_classes)
    )
    if len(names) != config.num_classes:
        raise ValueError(f"{len(names)} class names for a model with {config.num_classes} classes")
    prep = preprocessing or default_preprocessing(config)
    if prep.channels != config.in_channels:
        raise ValueError(
            f"preprocessing for {prep.channels}-channel images given for a model that takes "
            f"{config.in_channels} channels"
        )
    from vitviz import __version__

    prov = {
        "vitviz_version": __version__,
        "saved_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        **dict(provenance or {}),
    }
    metadata = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "config": json.dumps(config.to_dict()),
        "class_names": json.dumps(names),
        "preprocessing": json.dumps(prep.to_dict()),
        "provenance": json.dumps(prov, default=str),
        "model_kind": kind_of(model).name,  # whose config_from_dict reads ``config``
    }
    state = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}
    target = Path(path)
    with atomic_path(target) as tmp:
        save_file(state, str(tmp), metadata=metadata)
    return target


def is_native(metadata: Mapping[str, str] | None) -> bool:
    return bool(metadata) and metadata.get("format") == FORMAT_NAME


def build_model(config: ViTConfig, state: Mapping[str, torch.Tensor]) -> VisionTransformer:
    """A model in eval mode holding exactly ``state`` (no second copy of the weights).

    Raises CheckpointError naming missing, unexpected and mis-shaped keys.
    """
    blocks = len({k.split(".", 2)[1] for k in state if k.startswith("blocks.")})
    if config.depth != blocks:  # before building: a depth of 10⁹ would take hours to build
        raise CheckpointError(
            f"The weights do not fit the model: the settings say depth {config.depth}, "
            f"the weights hold {blocks} blocks."
        )
    with torch.device("meta"):
        model = VisionTransformer(config)
    return assign_exactly(model, state)


def load_native(
    state: Mapping[str, torch.Tensor], metadata: Mapping[str, str], path: Path | None = None
) -> LoadedModel:
    """Rebuild a LoadedModel from a native file's tensors and metadata."""
    version = metadata.get("format_version")
    if version != FORMAT_VERSION:
        raise CheckpointError(
            f"This vitviz checkpoint has format version {version}; this vitviz "
            f"reads version {FORMAT_VERSION}. Update vitviz to open it."
        )
    name = metadata.get("model_kind", UNNAMED_KIND)
    try:
        kind = get_kind(name)
    except ValueError:
        raise CheckpointError(
            f"This vitviz checkpoint holds a model of kind {name!r}, which this vitviz does not "
            "know. Update vitviz to open it."
        ) from None
    try:
        config = kind.config_from_dict(json.loads(metadata["config"]))
        names = [str(n) for n in json.loads(metadata.get("class_names", "null") or "null") or []]
        prep_raw = metadata.get("preprocessing")
        prep = (
            Preprocessing.from_dict({"channels": config.in_channels, **json.loads(prep_raw)})
            if prep_raw
            else default_preprocessing(config)
        )
        provenance = json.loads(metadata.get("provenance", "{}"))
    except (KeyError, ValueError, TypeError) as exc:
        raise CheckpointError(
            f"The vitviz metadata of this checkpoint is damaged ({exc})."
        ) from exc
    if prep.channels != config.in_channels:
        raise CheckpointError(
            f"The vitviz metadata of this checkpoint is damaged (its preprocessing has "
            f"{prep.channels} channels, its model takes {config.in_channels})."
        )
    if len(names) != config.num_classes:
        names = default_class_names(config.num_classes)
    model = kind.build_from_state(config, state)
    return LoadedModel(
        model=model,
        class_names=names,
        preprocessing=prep,
        family="vitviz",
        path=path,
        provenance=provenance,
        resolved_kind=kind,
    )
