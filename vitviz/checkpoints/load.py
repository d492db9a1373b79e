"""load_checkpoint: any supported checkpoint file -> LoadedModel (the one model, eval mode)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vitviz.checkpoints.errors import CheckpointError
from vitviz.checkpoints.loaded import LoadedModel, default_class_names
from vitviz.checkpoints.native import build_model, default_preprocessing, is_native, load_native
from vitviz.checkpoints.reading import ACCEPTED, RawCheckpoint, read_checkpoint
from vitviz.imaging import Preprocessing
from vitviz.model import ViTConfig


def load_checkpoint(path: str | Path, config: dict[str, Any] | None = None) -> LoadedModel:
    """Open a checkpoint safely and convert it to the one model.

    ``config`` supplies what the weights can't say (a ViTConfig dict, optionally with
    ``class_names`` and ``preprocessing``) for a plain state dict of vitviz's own layout.
    """
    raw = read_checkpoint(path)
    if is_native(raw.metadata):
        return load_native(raw.state, raw.metadata, raw.path)
    spec = config if config is not None else _embedded_config(raw)
    if spec is not None and "patch_embed.proj.weight" in raw.state:
        return _load_own_layout(raw, spec)
    raise CheckpointError(_not_understood(raw))


def _embedded_config(raw: RawCheckpoint) -> dict[str, Any] | None:
    """A ViTConfig dict stored beside the weights (e.g. {'model': sd, 'config': {...}})."""
    cfg = raw.extra.get("config")
    if isinstance(cfg, str):
        try:
            cfg = json.loads(cfg)
        except ValueError:
            return None
    return cfg if isinstance(cfg, dict) else None


def _load_own_layout(raw: RawCheckpoint, spec: dict[str, Any]) -> LoadedModel:
    spec = dict(spec)
    names = spec.pop("class_names", None)
    prep = spec.pop("preprocessing", None)
    try:
        config = ViTConfig.from_dict(spec)
        preprocessing = Preprocessing.from_dict(prep) if prep else default_preprocessing(config)
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"The model settings given for this checkpoint are invalid: {exc}"
                              ) from exc
    model = build_model(config, raw.state)
    names = [str(n) for n in names] if names else default_class_names(config.num_classes)
    return LoadedModel(model=model, class_names=names, preprocessing=preprocessing,
                       family="vitviz-state-dict", path=raw.path)


def _not_understood(raw: RawCheckpoint) -> str:
    name = raw.path.name if raw.path else "This checkpoint"
    keys = list(raw.state)
    shown = ", ".join(keys[:5]) + (f" … ({len(keys)} tensors)" if len(keys) > 5 else "")
    return (f"{name}: vitviz does not recognise this layout of weights (first keys: {shown}). "
            f"{ACCEPTED}")
