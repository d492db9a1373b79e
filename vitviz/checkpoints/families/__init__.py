"""Checkpoint families: one converter per family, recognised by key names, tried in order.

Each entry is (name, detect, convert); the first whose ``detect`` accepts a checkpoint converts
it to a model of some kind. The order (``all_families``): vitviz's own state dict with its
config; then each registered kind's families (``ModelKind.families``, in registration order,
read when first asked): the ViT, registered last, brings the generic layouts, more specific ones
before the general ones (DINO's sentinel keys before timm's layout, which DINO shares).
"""

from __future__ import annotations

from vitviz.checkpoints.families import own
from vitviz.checkpoints.families.base import Conversion, Family, Source


def all_families() -> tuple[Family, ...]:
    """Every family, in the order they are tried."""
    from vitviz.kindapi import all_kinds

    by_kind = tuple(family for kind in all_kinds() for family in kind.families)
    return (own.FAMILY, *by_kind)


def find_family(source: Source) -> Family | None:
    """The first family whose key names match ``source``, or None."""
    return next((f for f in all_families() if f.detect(source)), None)


__all__ = ["Conversion", "Family", "Source", "all_families", "find_family"]
