"""convert_checkpoint: any supported checkpoint -> vitviz's native .safetensors, with provenance."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vitviz.checkpoints.load import load_checkpoint
from vitviz.checkpoints.loaded import LoadedModel
from vitviz.checkpoints.native import save_checkpoint


def convert_checkpoint(
    source: str | Path, target: str | Path, config: Mapping[str, Any] | None = None
) -> LoadedModel:
    """Open ``source`` (file or folder), write it to ``target`` in the native format (atomically);
    returns the loaded model. Provenance records where it came from, its family and the notes."""
    loaded = load_checkpoint(source, config=config)
    provenance = {"converted_from": str(Path(source).resolve()), "family": loaded.family}
    if loaded.notes:
        provenance["conversion_notes"] = list(loaded.notes)
    save_checkpoint(
        loaded.model,
        target,
        class_names=loaded.class_names,
        preprocessing=loaded.preprocessing,
        provenance=provenance,
    )
    loaded.provenance = provenance
    return loaded
