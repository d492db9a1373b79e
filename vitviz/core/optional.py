"""The optional libraries some checkpoint families need (timm, transformers, open_clip), and the
one way a message says how to get them: the ``families`` extra."""

from __future__ import annotations

FAMILIES_INSTALL = "bash packaging/install.sh --families, or pip install 'vitviz[families]'"


def install_to_open(library: str, what: str) -> str:
    """``"install timm to open NAME (bash packaging/install.sh --families, or …)"``."""
    return f"install {library} to open {what} ({FAMILIES_INSTALL})"
