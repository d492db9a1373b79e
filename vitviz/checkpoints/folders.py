"""Checkpoint folders (Hugging Face / timm: config.json + weights) and files beside a checkpoint.

A folder holds ``config.json`` and one of model.safetensors, pytorch_model.bin or a sharded
``*.index.json`` with its shards; ``preprocessor_config.json`` says how images are prepared.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vitviz.checkpoints.errors import CheckpointError
from vitviz.checkpoints.reading import ACCEPTED, RawCheckpoint, read_checkpoint

WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
FOLDER_ACCEPTED = (
    "A checkpoint folder needs config.json and model.safetensors or "
    "pytorch_model.bin (a Hugging Face or timm folder)."
)


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object from ``path``; None when missing; CheckpointError when not valid JSON."""
    if not path.is_file():
        return None
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise CheckpointError(f"{path.parent.name}/{path.name} is not valid JSON ({exc}).") from exc
    if not isinstance(value, dict):
        raise CheckpointError(f"{path.parent.name}/{path.name} is not a JSON object.")
    return value


def is_model_folder(path: Path) -> bool:
    return path.is_dir() and (path / "config.json").is_file()


def folder_weights(folder: Path) -> Path:
    for name in WEIGHT_FILES:
        if (folder / name).is_file():
            return folder / name
    raise CheckpointError(
        f"{folder.name} has config.json but no weights "
        f"({', '.join(WEIGHT_FILES)}). {FOLDER_ACCEPTED}"
    )


def read_folder(folder: Path) -> RawCheckpoint:
    """The weights of a model folder (sharded ones merged); ``path`` is the folder."""
    if not (folder / "config.json").is_file():
        raise CheckpointError(
            f"{folder.name} is a folder without config.json. {FOLDER_ACCEPTED} {ACCEPTED}"
        )
    read_json(folder / "config.json")  # a damaged config.json is named before the weights
    weights = folder_weights(folder)
    if weights.name.endswith(".index.json"):
        raw = _read_sharded(weights)
    else:
        raw = read_checkpoint(weights)
    raw.path = folder
    return raw


def _read_sharded(index_path: Path) -> RawCheckpoint:
    index = read_json(index_path) or {}
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError(f"{index_path.name} has no weight_map.")
    state: dict[str, Any] = {}
    for shard in sorted(set(weight_map.values())):
        part = index_path.parent / str(shard)
        if part.parent != index_path.parent:
            raise CheckpointError(f"{index_path.name} points outside its folder ({shard}).")
        state.update(read_checkpoint(part).state)
    return RawCheckpoint(state=state)


def beside(path: Path) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(config.json, preprocessor_config.json) of the folder a weights file or folder is in,
    when config.json is a Hugging Face or timm model config; else (None, None)."""
    folder = path if path.is_dir() else path.parent
    try:
        cfg = read_json(folder / "config.json")
    except CheckpointError:
        if path.is_dir():
            raise
        return None, None  # an unrelated config.json beside a file: not ours to judge
    if cfg is None or not ("model_type" in cfg or "architecture" in cfg):
        return None, None
    return cfg, read_json(folder / "preprocessor_config.json")
