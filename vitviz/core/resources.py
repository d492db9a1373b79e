"""Where the shipped assets live (icons, the default model, sample images).

The top-level ``resources/`` folder of the source tree; in a wheel it is installed as
``<prefix>/share/vitviz/resources``; in the PyInstaller bundle it sits beside the executable's
unpacked files. ``VITVIZ_RESOURCES`` overrides all of these.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

DEFAULT_MODEL_NAME = "vitviz-shapes-default.safetensors"


def _candidates() -> list[Path]:
    found = []
    if os.environ.get("VITVIZ_RESOURCES"):
        found.append(Path(os.environ["VITVIZ_RESOURCES"]))
    bundle = getattr(sys, "_MEIPASS", None)
    if bundle:
        found.append(Path(bundle) / "resources")
    found.append(Path(__file__).resolve().parents[2] / "resources")
    found.append(Path(sys.prefix) / "share" / "vitviz" / "resources")
    return found


def resource_dir() -> Path:
    """The folder holding the shipped assets (the first candidate that exists)."""
    for path in _candidates():
        if (path / "icons").is_dir():
            return path
    raise FileNotFoundError("vitviz's resources folder was not found; reinstall vitviz")


def icon_path(size: int | None = None) -> Path:
    """The application icon: SVG, or a PNG of the given pixel size."""
    name = "vitviz.svg" if size is None else f"vitviz-{size}.png"
    return resource_dir() / "icons" / name


def default_model_path() -> Path | None:
    """The model trained by the project and shipped with it, if present."""
    path = resource_dir() / "models" / DEFAULT_MODEL_NAME
    return path if path.is_file() else None


def sample_images() -> list[Path]:
    """The shipped sample images, sorted by name."""
    from vitviz.core.image_formats import is_image_path  # the formats vitviz reads

    folder = resource_dir() / "samples"
    if not folder.is_dir():
        return []
    return sorted(
        p
        for p in folder.iterdir()
        if is_image_path(p) and p.is_file() and not p.stem.endswith("_mask")
    )
