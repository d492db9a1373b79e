"""Checkpoint families: one converter per family, recognised by key names, tried in order.

Each entry is (name, detect, convert); the first whose ``detect`` accepts a checkpoint converts
it to vitviz's one model. More specific layouts come before the general ones (DINO's sentinel
keys before timm's layout, which DINO shares).
"""

from __future__ import annotations

from vitviz.checkpoints.families import (
    dino,
    huggingface,
    lucidrains,
    own,
    timm,
    torchvision,
    tutorial,
)
from vitviz.checkpoints.families.base import Conversion, Family, Source
from vitviz.kinds.swin.families import huggingface as swin_huggingface
from vitviz.kinds.swin.families import timm as swin_timm
from vitviz.kinds.swin.families import torchvision as swin_torchvision

FAMILIES: tuple[Family, ...] = (
    own.FAMILY,
    swin_torchvision.FAMILY,
    swin_timm.FAMILY,
    swin_huggingface.FAMILY,
    torchvision.FAMILY,
    huggingface.FAMILY,
    dino.FAMILY,
    timm.FAMILY,
    lucidrains.FAMILY,
    tutorial.FAMILY,
)


def find_family(source: Source) -> Family | None:
    """The first family whose key names match ``source``, or None."""
    return next((f for f in FAMILIES if f.detect(source)), None)


__all__ = ["FAMILIES", "Conversion", "Family", "Source", "find_family"]
