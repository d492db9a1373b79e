"""Outcomes that arrive in any order handed on in the order of their index (the reductions are
made in a fixed order, so the summaries do not depend on which worker finished first)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from vitviz.cluster.job import Outcome


class InOrder:
    """Holds outcomes until every lower index has come; ``expected`` the indices of the run."""

    def __init__(self, expected: Iterable[int]) -> None:
        self._order = sorted(set(expected))
        self._next = 0  # position in _order of the next index to hand on
        self._expected = set(self._order)
        self._waiting: dict[int, Outcome] = {}

    def add(self, outcome: Outcome) -> Iterator[Outcome]:
        """Take one outcome (a repeat of an index already seen is dropped) and yield those
        now next in order."""
        if self.seen(outcome.index):
            return
        self._waiting[outcome.index] = outcome
        while self._next < len(self._order) and self._order[self._next] in self._waiting:
            yield self._waiting.pop(self._order[self._next])
            self._next += 1

    def seen(self, index: int) -> bool:
        """Whether ``index`` came before (or is not one of the run's: nothing to wait for)."""
        handed_on = self._next > 0 and index <= self._order[self._next - 1]
        return index in self._waiting or handed_on or index not in self._expected

    @property
    def pending(self) -> int:
        """Outcomes held back, waiting for a lower index."""
        return len(self._waiting)

    def drain(self) -> list[Outcome]:
        """The outcomes held back, lowest index first (a run that stops early keeps them)."""
        out = [self._waiting.pop(i) for i in sorted(self._waiting)]
        return out

    def missing(self) -> list[int]:
        """The indices not handed on (a run stopped early)."""
        return self._order[self._next :]
