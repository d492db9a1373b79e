"""The images of a run on an engine: folders (``recursive``: and their sub-folders), globs
(``data/*/*.jpg``, quoted so the shell leaves them) and text files of paths (``.txt``, one a
line, ``#`` comments; a relative path is relative to the list's folder)."""

from __future__ import annotations

import glob
from collections.abc import Sequence
from pathlib import Path

from vitviz.core.errors import VitvizError

LIST_SUFFIXES = (".txt", ".lst")
GLOB_CHARACTERS = "*?["


class InputError(VitvizError):
    """An input that gives no image (its message names it)."""


def _folder(folder: Path, recursive: bool) -> list[Path]:
    from vitviz.imaging.loading import list_images

    found = list_images(folder)
    if recursive:
        subs = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
        for sub in subs:
            found += _folder(sub, True)
    return found


def _listed(path: Path) -> list[Path]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read the list of images ({exc})") from exc
    out = []
    for line in lines:
        text = line.strip()
        if text and not text.startswith("#"):
            p = Path(text).expanduser()
            out.append(p if p.is_absolute() else path.parent / p)
    return out


def expand_inputs(inputs: Sequence[Path], recursive: bool = False) -> list[Path]:
    """The images of ``inputs``, in order: a folder's images (natural order; with
    ``recursive`` then each sub-folder's, by name), a glob's matches (sorted), a list's paths;
    anything else as given (the loader says what is wrong with it). InputError for a folder,
    glob or list that gives no image."""
    from vitviz.imaging.loading import is_image_path

    out: list[Path] = []
    for p in inputs:
        text = str(p)
        if p.is_dir() and not is_image_path(p):
            found = _folder(p, recursive)
        elif not p.exists() and any(c in text for c in GLOB_CHARACTERS):
            found = [Path(m) for m in sorted(glob.glob(text, recursive=recursive))]
            found = [m for m in found if m.is_file()]
        elif p.suffix.lower() in LIST_SUFFIXES and p.is_file():
            found = _listed(p)
        else:
            out.append(p)
            continue
        if not found:
            raise InputError(f"{p}: gives no images")
        out.extend(found)
    return out
