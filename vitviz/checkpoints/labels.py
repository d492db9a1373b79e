"""Class names: from the checkpoint, else ImageNet-1k for 1000-class heads, else "class i".

The ImageNet-1k names come offline from torchvision's weights metadata (a dependency already
installed), never from a download.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from vitviz.checkpoints.loaded import default_class_names


@functools.cache
def imagenet_class_names() -> tuple[str, ...]:
    """The 1000 ImageNet-1k class names as torchvision states them (index order)."""
    from torchvision.models import ViT_B_16_Weights

    return tuple(ViT_B_16_Weights.IMAGENET1K_V1.meta["categories"])


def names_from_id2label(id2label: Mapping[Any, Any] | None, num_classes: int) -> list[str] | None:
    """Hugging Face ``id2label`` ({"0": "tabby", ...}) -> names in index order, if complete."""
    if not isinstance(id2label, Mapping) or not id2label:
        return None
    try:
        by_index = {int(k): str(v) for k, v in id2label.items()}
    except (TypeError, ValueError):
        return None
    if sorted(by_index) != list(range(num_classes)):
        return None
    return [by_index[i] for i in range(num_classes)]


def names_from_timm(cfg: Mapping[str, Any] | None, num_classes: int) -> list[str] | None:
    """timm config.json ``label_names`` (list, or {index: name}); ``label_descriptions`` maps a
    name (e.g. an ImageNet synset) to its readable description, used when present."""
    if not isinstance(cfg, Mapping):
        return None
    pretrained = cfg.get("pretrained_cfg") if isinstance(cfg.get("pretrained_cfg"), Mapping) else {}
    labels = cfg.get("label_names", pretrained.get("label_names"))
    descriptions = cfg.get("label_descriptions", pretrained.get("label_descriptions")) or {}
    if isinstance(labels, Mapping):
        names = names_from_id2label(labels, num_classes)
    elif isinstance(labels, Sequence) and not isinstance(labels, str):
        names = [str(n) for n in labels] if len(labels) == num_classes else None
    else:
        names = None
    if names is None:
        return None
    if isinstance(descriptions, Mapping):
        names = [str(descriptions.get(n, n)) for n in names]
    return names


def resolve_class_names(
    num_classes: int,
    user: Any,
    from_checkpoint: Sequence[str] | None,
    imagenet_if_1000: bool,
) -> list[str]:
    """User's names > the checkpoint's > ImageNet-1k (1000 classes, where the family says so) >
    "class i"."""
    if isinstance(user, Sequence) and not isinstance(user, str) and len(user) == num_classes:
        return [str(n) for n in user]
    if from_checkpoint is not None and len(from_checkpoint) == num_classes:
        return [str(n) for n in from_checkpoint]
    if imagenet_if_1000 and num_classes == 1000:
        return list(imagenet_class_names())
    return default_class_names(num_classes)
