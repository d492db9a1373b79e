"""load_checkpoint: any supported checkpoint file or folder -> LoadedModel (the one model, eval).

Dispatch: a vitviz native file loads directly; a folder with config.json is read as a Hugging
Face or timm folder; anything else is matched against the family registry by its key names
and converted (see ``vitviz.checkpoints.families``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vitviz.checkpoints.errors import CheckpointError
from vitviz.checkpoints.families import Family, Source, find_family
from vitviz.checkpoints.folders import FOLDER_ACCEPTED, beside, read_folder
from vitviz.checkpoints.loaded import LoadedModel
from vitviz.checkpoints.native import build_model, is_native, load_native
from vitviz.checkpoints.reading import ACCEPTED, read_checkpoint
from vitviz.checkpoints.sidecar import user_settings


def load_checkpoint(path: str | Path, config: Mapping[str, Any] | None = None) -> LoadedModel:
    """Open a checkpoint (file or model folder) safely and convert it to the one model.

    ``config`` supplies what the weights can't say (ViTConfig fields, ``class_names``,
    ``preprocessing``); it updates ``<checkpoint>.vitviz.json`` when that file is there.
    Raises CheckpointError with a one-line message for anything that can't be opened.
    """
    p = Path(path)
    raw = read_folder(p) if p.is_dir() else read_checkpoint(p)
    if is_native(raw.metadata):
        return load_native(raw.state, raw.metadata, raw.path)
    folder_config, preprocessor = beside(p) if p.exists() else (None, None)
    source = Source(
        state=raw.state,
        path=p,
        extra=raw.extra,
        metadata=raw.metadata,
        folder_config=folder_config,
        preprocessor=preprocessor,
        user=user_settings(p, config),
    )
    keys = list(raw.state)
    family, prefix = _find_family_under_prefixes(source)
    if family is None:
        raise CheckpointError(_not_understood(keys, p))
    conversion = family.convert(source)
    if prefix:
        conversion.notes.insert(0, f"weights read from under the key prefix {prefix!r}")
    model = build_model(conversion.config, conversion.state)
    return LoadedModel(
        model=model,
        class_names=conversion.class_names,
        preprocessing=conversion.preprocessing,
        family=conversion.family,
        path=p,
        notes=conversion.notes,
    )


def _find_family_under_prefixes(source: Source) -> tuple[Family | None, str]:
    """The family of the state dict, or of what sits under a prefix every key shares (e.g. a
    Lightning module's ``model.``), up to two levels deep; the prefix found ("" for none)."""
    stripped = ""
    for _ in range(3):
        family = find_family(source)
        if family is not None:
            return family, stripped
        heads = {k.split(".", 1)[0] for k in source.state}
        if len(heads) != 1 or not all("." in k for k in source.state):
            break
        head = heads.pop() + "."
        for key in list(source.state):  # in place: no second reference to any tensor
            source.state[key[len(head) :]] = source.state.pop(key)
        stripped += head
    return None, stripped


def _not_understood(keys: list[str], p: Path) -> str:
    shown = ", ".join(keys[:5]) + (f" … ({len(keys)} tensors)" if len(keys) > 5 else "")
    extra = f" {FOLDER_ACCEPTED}" if p.is_dir() else ""
    return (
        f"{p.name}: vitviz does not recognise this layout of weights (first keys: {shown}). "
        f"{ACCEPTED}{extra}"
    )
