"""The images a folder job (head statistics, faithfulness) measures: those directly in the
folder, or a VitvizError the window shows in one line."""

from __future__ import annotations

from pathlib import Path

from vitviz.core.errors import VitvizError


def folder_images(folder: Path) -> list[Path]:
    """The images directly in ``folder``; VitvizError when it can't be listed or holds none."""
    from vitviz.imaging.loading import list_images

    try:
        images = list_images(folder)
    except ValueError as exc:
        raise VitvizError(str(exc)) from exc
    if not images:
        raise VitvizError(f"{folder.name} holds no images vitviz can read.")
    return images
