"""Each input image's output stem as ``explain`` names its files, on either engine."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


def output_stems(paths: Sequence[Path]) -> list[str]:
    """Each image's output stem as ``explain`` names it: the file's stem, ``-2``, ``-3`` … for
    a stem met again."""
    from vitviz.pipeline.export import output_stem

    seen: dict[str, int] = {}
    names = []
    for path in paths:
        stem = output_stem(path.stem)
        seen[stem] = seen.get(stem, 0) + 1
        names.append(stem if seen[stem] == 1 else f"{stem}-{seen[stem]}")
    return names
