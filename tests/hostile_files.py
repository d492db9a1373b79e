"""Seeded generators of hostile images and checkpoints, shared by tests/project/test_fuzz.py and
benchmarks/fuzz.py.

A ``Case`` is a small named object: what kind of input it is, a function that writes its file(s)
into a given folder and returns the path vitviz is given, and what vitviz must do with it
(``accepted``: a valid control; ``refused``: vitviz's own one-line error; ``either``: the file
may or may not be usable, e.g. a flipped bit inside pixel data, but it must end cleanly).

Generators are functions ``(rng, first) -> list[Case]``: ``first`` (round 0) adds the fixed
variants, every round adds the seeded random ones (truncation points, flipped bits, random
sidecar values, ...). Nothing here imports torch until a checkpoint is written.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

Kind = Literal["image", "checkpoint"]
Expect = Literal["accepted", "refused", "either"]
EXPECTS = ("accepted", "refused", "either")


@dataclass(frozen=True)
class Case:
    """One hostile (or control) input.

    ``write(folder)`` creates the file(s) inside ``folder`` (which exists and is empty) and returns
    the path to give vitviz. ``ci``: part of the CI subset (tests/project/test_fuzz.py);
    ``heavy``: slow or
    memory-hungry, run by the benchmark only.
    """

    name: str  # "<group>/<variant>", unique
    kind: Kind
    write: Callable[[Path], Path]
    expect: Expect
    ci: bool = True
    heavy: bool = False
    # ``reference(path)``: the library's own model holding the written file's tensors (raises
    # when it can't take them): an accepted case must run as it does (hostile_kinds.py)
    reference: Callable[[Path], Any] | None = None

    def __post_init__(self) -> None:
        if self.expect not in EXPECTS:
            raise ValueError(f"{self.name}: expect must be one of {EXPECTS}, got {self.expect!r}")
        if "/" not in self.name:
            raise ValueError(f"{self.name}: a case name is '<group>/<variant>'")

    @property
    def group(self) -> str:
        return self.name.split("/", 1)[0]


Generator = Callable[[random.Random, bool], list[Case]]


def generators() -> list[Generator]:
    """Every generator, images first (imported here so each module stays one job)."""
    from hostile_checkpoints import CHECKPOINT_GENERATORS
    from hostile_images import IMAGE_GENERATORS
    from hostile_kinds import KIND_GENERATORS

    return [*IMAGE_GENERATORS, *CHECKPOINT_GENERATORS, *KIND_GENERATORS]


def _round(seed: int, index: int) -> Iterator[Case]:
    for gen in generators():
        rng = random.Random(f"{seed}/{gen.__name__}/{index}")
        yield from gen(rng, index == 0)


def all_cases(seed: int = 0, count: int | None = None, max_rounds: int = 400) -> list[Case]:
    """Round 0 (every fixed variant and one set of random ones), then more random rounds until
    ``count`` cases. With ``count`` below round 0's size the cases are taken from each group in
    turn, so every group is still there. Names are unique (a repeated random variant is dropped).
    """
    seen: set[str] = set()
    out: list[Case] = []
    for index in range(max_rounds):
        for case in _round(seed, index):
            if case.name not in seen:
                seen.add(case.name)
                out.append(case)
        if count is None or len(out) >= count:
            break
    if count is None or len(out) <= count:
        return out
    return round_robin(out, count)


def round_robin(cases: list[Case], count: int) -> list[Case]:
    """``count`` cases taken from each group in turn (order within a group kept)."""
    groups: dict[str, list[Case]] = {}
    for case in cases:
        groups.setdefault(case.group, []).append(case)
    queues = [iter(g) for g in groups.values()]
    picked: list[Case] = []
    while len(picked) < count and queues:
        alive = []
        for q in queues:
            case = next(q, None)
            if case is None:
                continue
            alive.append(q)
            picked.append(case)
            if len(picked) == count:
                break
        queues = alive
    return picked


def ci_cases(seed: int = 0) -> list[Case]:
    """The CI subset: round 0's cases marked ``ci`` and not ``heavy`` (every group is there)."""
    return [c for c in _round(seed, 0) if c.ci and not c.heavy]
