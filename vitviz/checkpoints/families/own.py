"""vitviz's own layout as a plain state dict, with the full model config beside it (embedded in
the file as ``{'model': sd, 'config': {...}}``, or given as a sidecar / ``config=``)."""

from __future__ import annotations

import json
from typing import Any

from vitviz.blocks import ViTConfig
from vitviz.checkpoints.errors import CheckpointError
from vitviz.checkpoints.families.base import Conversion, Family, FamilyInfo, Source
from vitviz.checkpoints.loaded import default_class_names
from vitviz.checkpoints.native import default_preprocessing
from vitviz.imaging import Preprocessing


def embedded_config(source: Source) -> dict[str, Any] | None:
    """A ViTConfig dict stored beside the weights (e.g. {'model': sd, 'config': {...}})."""
    cfg = source.extra.get("config")
    if isinstance(cfg, str):
        try:
            cfg = json.loads(cfg)
        except ValueError:
            return None
    return cfg if isinstance(cfg, dict) else None


def _spec(source: Source) -> dict[str, Any] | None:
    """The full config: given by the user (it names ``dim``) or embedded in the file."""
    if "dim" in source.user:
        return dict(source.user)
    embedded = embedded_config(source)
    return {**embedded, **source.user} if embedded is not None else None


def detect(source: Source) -> bool:
    return _spec(source) is not None and "patch_embed.proj.weight" in source.state


def convert(source: Source) -> Conversion:
    spec = _spec(source) or {}
    names = spec.pop("class_names", None)
    prep = spec.pop("preprocessing", None)
    try:
        config = ViTConfig.from_dict(spec)
        preprocessing = Preprocessing.from_dict(prep) if prep else default_preprocessing(config)
    except (TypeError, ValueError) as exc:
        raise CheckpointError(
            f"The model settings given for this checkpoint are invalid: {exc}"
        ) from exc
    names = [str(n) for n in names] if names else default_class_names(config.num_classes)
    state = dict(source.state)
    source.state.clear()
    return Conversion(
        family="vitviz-state-dict",
        config=config,
        state=state,
        class_names=names,
        preprocessing=preprocessing,
    )


FAMILY = Family(
    "vitviz-state-dict",
    detect,
    convert,
    info=FamilyInfo(
        label="vitviz's own state dict",
        names="models trained in vitviz's Training tab or written by `vitviz-cli convert`",
        forms="one .safetensors with the config in its metadata; a .pth with its config",
        parts=("every part of vitviz's ViT, as its config says",),
    ),
)
