"""What every kind's timm families share: the installed timm's version, the error of an
architecture that can't be described, and whether a name is one of timm's models."""

from __future__ import annotations

from importlib import metadata


def timm_version() -> str | None:
    """The installed timm's version (read from its metadata: timm is not imported)."""
    try:
        return metadata.version("timm")
    except metadata.PackageNotFoundError:
        return None


class ArchError(Exception):
    """An architecture that can't be described (unknown name, bad model_args): the message."""


def known_name(name: str) -> bool:
    """Whether ``name`` is a timm model name: one a registered family knows (its own table,
    ``Family.knows_name``), else (timm installed) one timm can build."""
    from vitviz.checkpoints.families import all_families

    if any(f.knows_name is not None and f.knows_name(name) for f in all_families()):
        return True
    if timm_version() is None:
        return False
    import timm

    return bool(timm.is_model(name))
