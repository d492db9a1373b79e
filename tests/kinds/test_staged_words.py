"""A staged kind's query without a click is said alike in the side panel's Query row and in the
map's title where both come from the shared words (a Swin's, a LeViT's, a PVT's without a CLS):
the Query row said "average pool (every token)" beside a title's "mean over the tokens"."""

from __future__ import annotations

from vitviz.kindapi.registry import all_kinds
from vitviz.kinds.staged import StagedKind

SHARED = {"swin", "levit", "pyramid"}  # their Query row is StagedKind.view_words' POOL_WORDS


def test_the_query_row_and_the_title_name_one_query() -> None:
    kinds = {k.name: k for k in all_kinds() if isinstance(k, StagedKind)}
    assert set(kinds) >= SHARED
    for name in sorted(SHARED):
        kind = kinds[name]
        title = kind.POOL_QUERY.removeprefix("query: ")
        assert kind.POOL_WORDS.startswith(title), (name, kind.POOL_WORDS, title)
