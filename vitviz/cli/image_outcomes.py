"""A Ray job's loop over its images (DESIGN §7): each image's ``Outcome``, its record, or the
command's one-image refusal (the exception's message) when measuring it failed."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from vitviz.cluster.job import ImageItem, Outcome

Measured = TypeVar("Measured")


def image_outcomes(
    items: Sequence[ImageItem],
    measure: Callable[[ImageItem], Measured],
    record: Callable[[ImageItem, Measured], dict[str, Any]],
) -> list[Outcome]:
    """For each item in order: ``measure(item)``; an exception there becomes the item's error,
    else ``record(item, measured)`` (outside the refusal: its own errors are not the image's)."""
    out = []
    for it in items:
        try:
            measured = measure(it)
        except Exception as exc:  # noqa: BLE001  (the command's one-image refusal)
            out.append(Outcome(it.index, it.path, None, str(exc)))
            continue
        out.append(Outcome(it.index, it.path, record(it, measured)))
    return out
