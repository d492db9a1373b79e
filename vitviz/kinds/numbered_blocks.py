"""The stages and blocks a checkpoint's tensor names number (DESIGN §4), read the same way by
the kinds' families: each stage's block indices, refused unless both are numbered 0..n-1."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable


def numbered_stages(
    keys: Iterable[str],
    pattern: re.Pattern[str],
    refuse: Callable[[str], Exception],
    *,
    some: bool = False,
    found_word: str = "found",
) -> dict[int, list[int]]:
    """{stage: its block indices, sorted}, stages in order, from the ``keys`` ``pattern``
    matches (group 1 the stage, group 2 the block); ``refuse(what)`` raised unless the stages
    and each stage's blocks are numbered 0..n-1 (and, ``some``, there is at least one), its
    words ending "({found_word} [stages])"."""
    found: dict[int, set[int]] = {}
    for key in keys:
        m = pattern.match(key)
        if m:
            found.setdefault(int(m.group(1)), set()).add(int(m.group(2)))
    stages = sorted(found)
    if (
        (some and not stages)
        or stages != list(range(len(stages)))
        or any(sorted(found[i]) != list(range(len(found[i]))) for i in stages)
    ):
        raise refuse(f"its stages and blocks are not numbered 0..n-1 ({found_word} {stages})")
    return {i: sorted(found[i]) for i in stages}
