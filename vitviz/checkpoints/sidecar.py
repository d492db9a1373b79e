"""The user's settings for a checkpoint: ``<checkpoint>.vitviz.json`` next to it, ``--config FILE``
on the CLI, or ``config=`` of load_checkpoint (which wins over the file, key by key).

Keys: any ViTConfig field (heads, image_size, norm_first, activation, ...), ``class_names``,
``preprocessing`` (a dict like Preprocessing.to_dict, partial allowed) and, for Linear patch
embeddings of tutorial models, ``patch_order`` ("c p1 p2" or "p1 p2 c").
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vitviz.checkpoints.errors import CheckpointError
from vitviz.checkpoints.folders import read_json

SUFFIX = ".vitviz.json"


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
    return settings
