"""Checkpoint folders (Hugging Face / timm: config.json + weights) and files beside a checkpoint.

A folder holds ``config.json`` and one of model.safetensors, pytorch_model.bin or a sharded
``*.index.json`` with its shards. How images are prepared is the image processor's: the
``image_processor`` entry of ``processor_config.json`` (transformers 5 writes a processor's
settings there) or ``preprocessor_config.json``, read in the order transformers reads them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

from vitviz.checkpoints.errors import CheckpointError
from vitviz.checkpoints.reading import ACCEPTED, RawCheckpoint, read_checkpoint
from vitviz.checkpoints.timm_folder import check_timm_config

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


class Beside(NamedTuple):
    """What a model folder says beside its weights."""

    config: dict[str, Any] | None  # config.json (Hugging Face or timm)
    preprocessor: dict[str, Any] | None  # the image processor's settings
    found: str  # where those came from, or what was found instead (for notes)


NO_PROCESSOR = "no preprocessor_config.json or processor_config.json"


def read_image_processor(folder: Path) -> tuple[dict[str, Any] | None, str]:
    """(the image processor's settings, their origin) of a Hugging Face folder: the
    ``image_processor`` object of ``processor_config.json`` first, as transformers reads it,
    else ``preprocessor_config.json``; (None, what was found instead) without either."""
    processor = read_json(folder / "processor_config.json")
    nested = None if processor is None else processor.get("image_processor")
    if nested is not None and not isinstance(nested, dict):
        raise CheckpointError(
            f"{folder.name}/processor_config.json: its image_processor is not a JSON object."
        )
    if nested is not None:
        return nested, "processor_config.json's image_processor"
    single = read_json(folder / "preprocessor_config.json")
    if single is not None:
        return single, "preprocessor_config.json"
    if processor is not None:
        return None, "no preprocessor_config.json, and processor_config.json has no image_processor"
    return None, NO_PROCESSOR


def beside(path: Path) -> Beside:
    """config.json and the image processor of the folder a weights file or folder is in, when
    config.json is a Hugging Face or timm model config; else nothing."""
    folder = path if path.is_dir() else path.parent
    try:
        cfg = read_json(folder / "config.json")
    except CheckpointError:
        if path.is_dir():
            raise
        return Beside(None, None, NO_PROCESSOR)  # an unrelated config.json beside a file
    if cfg is None or not ("model_type" in cfg or "architecture" in cfg):
        return Beside(None, None, NO_PROCESSOR)
    if "model_type" not in cfg:  # timm's: its fields' types and sizes, before a family reads it
        check_timm_config(cfg, folder.name)
    return Beside(cfg, *read_image_processor(folder))
