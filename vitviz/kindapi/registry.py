"""The kinds' registry: each kind of network vitviz explains (ViT, Swin, ...) is one package
under ``vitviz/kinds/``.

A kind's package defines one object meeting ``vitviz.kindapi.protocol.ModelKind`` and is named
once in ``KIND_PACKAGES`` (the one line that registers it); its package is imported the first
time a kind is looked up, so the layers below the kinds can ask for one (a plugin registry: the
shared code never imports a kind's package by name). ``register_kind`` adds one at run time (a
test's toy kind).
"""

from __future__ import annotations

import importlib
from typing import Any

from vitviz.kindapi.protocol import ModelKind

# One line per kind: the package whose ``KIND`` is registered. The most specific first (the ViT,
# which also takes any captured model from a user's code, is tried last).
KIND_PACKAGES: tuple[str, ...] = (
    "vitviz.kinds.clip",
    "vitviz.kinds.swin",
    "vitviz.kinds.pyramid",
    "vitviz.kinds.pit",
    "vitviz.kinds.mvit",
    "vitviz.kinds.levit",
    "vitviz.kinds.mobilevit",
    "vitviz.kinds.crossvit",
    "vitviz.kinds.tnt",
    "vitviz.kinds.volo",
    "vitviz.kinds.cait",
    "vitviz.kinds.convit",
    "vitviz.kinds.xcit",
    "vitviz.kinds.vit",
)

_KINDS: dict[str, ModelKind] = {}
_imported = False


class UnknownKindError(TypeError):
    """A model no registered kind owns."""


def _import_packages() -> None:
    global _imported
    if _imported:
        return
    _imported = True
    for name in KIND_PACKAGES:
        kind = importlib.import_module(name).KIND
        _KINDS.setdefault(kind.name, kind)


def register_kind(kind: ModelKind, *, first: bool = False) -> ModelKind:
    """Add ``kind``: tried before the others with ``first``, else after the others but before
    the kinds that take whatever is left (``catch_all``: the ViT, whose generic checkpoint
    layouts and captured models of a user's code come last). A name taken: ValueError."""
    _import_packages()
    if kind.name in _KINDS:
        raise ValueError(f"a model kind named {kind.name!r} is already registered")
    kinds = list(_KINDS.values())
    if first:
        at = 0
    else:
        at = next((i for i, k in enumerate(kinds) if getattr(k, "catch_all", False)), len(kinds))
    kinds.insert(at, kind)
    _KINDS.clear()
    _KINDS.update((k.name, k) for k in kinds)
    return kind


def unregister_kind(name: str) -> None:
    """Remove a kind registered at run time (tests clean up with this)."""
    _import_packages()
    get_kind(name)
    del _KINDS[name]


def all_kinds() -> tuple[ModelKind, ...]:
    """Every registered kind, in the order they are tried."""
    _import_packages()
    return tuple(_KINDS.values())


def get_kind(name: str) -> ModelKind:
    """The kind called ``name``; ValueError listing the registered names otherwise."""
    _import_packages()
    try:
        return _KINDS[name]
    except KeyError:
        raise ValueError(f"unknown model kind {name!r}; registered: {', '.join(_KINDS)}") from None


def kind_of(subject: Any) -> ModelKind:
    """The kind of a model, of a loaded checkpoint holding one (``.model``) or of an analysis
    (``.kind``): the model's ``model_kind`` where it names a registered kind, else the first
    kind that ``owns`` it. UnknownKindError when none does."""
    _import_packages()
    name = getattr(subject, "kind", None)
    if isinstance(name, str) and name in _KINDS:
        return _KINDS[name]
    model = getattr(subject, "model", subject)
    name = getattr(model, "model_kind", None)
    if isinstance(name, str) and name in _KINDS:
        return _KINDS[name]
    for kind in _KINDS.values():
        if kind.owns(model):
            return kind
    raise UnknownKindError(f"vitviz does not know how to explain a {type(model).__name__}")
