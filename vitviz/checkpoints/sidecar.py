"""The user's settings for a checkpoint: ``<checkpoint>.vitviz.json`` next to it, ``--config FILE``
on the CLI, or ``config=`` of load_checkpoint (which wins over the file, key by key).

Keys: any ViTConfig field (heads, image_size, norm_first, activation, ...), ``class_names``,
``preprocessing`` (a dict like Preprocessing.to_dict, partial allowed) and, for Linear patch
embeddings of tutorial models, ``patch_order`` ("c p1 p2" or "p1 p2 c").
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vitviz.blocks import ViTConfig
from vitviz.checkpoints.errors import CheckpointError
from vitviz.checkpoints.folders import read_json

SUFFIX = ".vitviz.json"
# ViTConfig fields by their annotation (the module uses postponed annotations: strings).
_FIELD_TYPES = {f.name: str(f.type) for f in dataclasses.fields(ViTConfig)}
_AT_LEAST_ONE = frozenset(
    {"patch_size", "in_channels", "dim", "depth", "heads", "mlp_hidden_dim", "head_hidden_dim"}
    | {"attn_head_dim"}
)
_MAX_INT = 2**31 - 1  # beyond any real model; keeps torch's shape arithmetic in range


def sidecar_path(path: Path) -> Path:
    """Where the settings of ``path`` (a file or folder) live: ``<name>.vitviz.json`` beside it."""
    return path.parent / (path.name + SUFFIX)


def user_settings(path: Path, config: Mapping[str, Any] | None) -> dict[str, Any]:
    """The sidecar's settings updated with ``config``; {} when neither is there."""
    side = sidecar_path(path)
    settings = read_json(side) or {}
    if config is not None:
        if not isinstance(config, Mapping):
            raise CheckpointError(
                f"The model settings for {path.name} must be a dict (a JSON "
                f"object), not {type(config).__name__}."
            )
        settings.update(config)
    check_settings(settings, path.name)
    return settings


def check_settings(settings: Mapping[str, Any], name: str) -> None:
    """Refuse a setting of the wrong kind (``"image_size": 32.5``, ``"heads": "2"``) with one line
    naming it, before any converter reads it. Unknown keys are left to the converters."""
    for key, value in settings.items():
        if not isinstance(key, str):
            raise CheckpointError(f"{name}: setting names must be strings, not {_shown(key)}.")
        if key in _FIELD_TYPES:
            problem = _field_problem(key, value, _FIELD_TYPES[key])
        elif key == "preprocessing":
            problem = _preprocessing_problem(value)
        elif key == "class_names":
            ok = isinstance(value, (list, tuple)) and all(isinstance(n, (str, int)) for n in value)
            problem = None if ok else "must be a list of names"
        elif key == "arch":
            problem = None if isinstance(value, str) and value else "must be a model name"
        elif key == "patch_order":
            problem = None if isinstance(value, str) else 'must be a string such as "c p1 p2"'
        else:
            problem = None
        if problem is not None:
            raise CheckpointError(f"{name}: the setting {key} {problem}, not {_shown(value)}.")


def _field_problem(key: str, value: Any, kind: str) -> str | None:
    """Why ``value`` can't be the ViTConfig field ``key`` annotated ``kind``; None if it can."""
    if value is None:
        return None if "None" in kind else "must be given (it can't be null)"
    if key == "image_size":
        return size_problem(value)
    base = kind.split("|")[0].strip()
    if base == "int":
        least = 1 if key in _AT_LEAST_ONE else 0
        return None if _whole(value, least) else f"must be a whole number from {least}"
    if base == "float":
        number = isinstance(value, numbers.Real) and not isinstance(value, bool)
        return None if number and math.isfinite(value) else "must be a finite number"
    if base == "bool":
        return None if isinstance(value, bool) else "must be true or false"
    if base == "str":
        return None if isinstance(value, str) else "must be a string"
    if base.startswith("dict"):
        return None if isinstance(value, dict) else "must be a JSON object"
    return None


def size_problem(value: Any) -> str | None:
    """None for a positive whole number or [height, width] of them; else what is accepted."""
    if _whole(value, 1):
        return None
    pair = isinstance(value, (list, tuple)) and len(value) == 2
    if pair and all(_whole(v, 1) for v in value):
        return None
    return "must be a whole number of pixels or [height, width]"


def _preprocessing_problem(value: Any) -> str | None:
    if not isinstance(value, dict):
        return "must be a JSON object (image_size, resize, crop_pct, mean, std, interpolation)"
    if "image_size" in value and size_problem(value["image_size"]) is not None:
        return "image_size " + str(size_problem(value["image_size"]))
    return None


def _whole(value: Any, least: int) -> bool:
    whole = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    return whole and least <= int(value) <= _MAX_INT


def _shown(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
