"""Names people know for a model on disk: the model id of a Hugging Face cache snapshot
("timm/vit_small_patch16_224.augreg_in21k_ft_in1k", not "model.safetensors" or a commit hash),
the folder's name for a folder (or a file with a generic name inside one), else the file's
name; and the architecture its folder's config.json names. Reads only small JSON files."""

from __future__ import annotations

import json
from pathlib import Path

# file stems that say nothing of the model: its folder's name says more
GENERIC_STEMS = frozenset(
    {
        "model",
        "pytorch_model",
        "open_clip_pytorch_model",
        "open_clip_model",
        "weights",
        "checkpoint",
        "model_best",
        "best",
        "last",
        "final",
        "state_dict",
    }
)
CONFIG_LIMIT = 1 << 20  # a config.json larger than this is not read for a name


def hub_model_id(path: Path) -> str | None:
    """ "owner/name" when ``path`` lies in a Hugging Face hub cache's ``models--owner--name``
    folder (a snapshot or a file in one), else None."""
    for part in reversed(Path(path).parts):
        if part.startswith("models--") and len(part) > len("models--"):
            return part.removeprefix("models--").replace("--", "/")
    return None


def known_name(path: Path | None, fallback: str = "model") -> str:
    """The name a user knows ``path`` by (see the module's docstring); ``fallback`` without
    a path (a model built from code: its family)."""
    if path is None:
        return fallback
    path = Path(path)
    model_id = hub_model_id(path)
    if model_id is not None:
        return model_id
    if path.suffix == "" or path.is_dir():
        return path.name or str(path)
    if path.stem.lower() in GENERIC_STEMS and path.parent.name:
        return f"{path.parent.name}/{path.name}"
    return path.name


def folder_architecture(path: Path | None) -> str | None:
    """The architecture the config.json of ``path`` (a folder, or the folder of a file) names:
    timm's ``architecture``, transformers' first ``architectures`` entry or its
    ``model_type``; None without one (or a file that isn't a small JSON object)."""
    if path is None:
        return None
    path = Path(path)
    config = (path if path.is_dir() else path.parent) / "config.json"
    try:
        if not config.is_file() or config.stat().st_size > CONFIG_LIMIT:
            return None
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    arch = data.get("architecture")
    if isinstance(arch, str) and arch:
        return arch
    archs = data.get("architectures")
    if isinstance(archs, list) and archs and isinstance(archs[0], str):
        return archs[0]
    model_type = data.get("model_type")
    return model_type if isinstance(model_type, str) and model_type else None


def architecture_words(path: Path | None, kind_label: str) -> str:
    """The architecture shown beside a model's name: its folder's (``folder_architecture``),
    else its kind's label ("Swin Transformer")."""
    return folder_architecture(path) or kind_label


def name_and_architecture(name: str, arch: str | None) -> str:
    """A model's name with its architecture beside it where that says more:
    "timm/vit_small_patch16_224.augreg_in21k_ft_in1k · vit_small_patch16_224", "my-run ·
    Swin Transformer"; the name alone when the architecture is empty or already in it."""
    return name if not arch or arch in name else f"{name} · {arch}"
