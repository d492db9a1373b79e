"""Raw attention maps: what one query attends to, per head, over the patch grid."""

from __future__ import annotations

from torch import Tensor

from vitviz.explain.tokens import patch_part


def attention_maps(
    attn: Tensor, grid: tuple[int, int], num_prefix: int, query: int | None = 0
) -> Tensor:
    """A_l[h, q, patches] as a grid: (B, H, N, N) -> (B, H, gh, gw).

    ``query`` is a token index (0 = CLS); ``None`` averages the rows of all patch queries.
    """
    rows = _query_rows(attn, num_prefix, query)  # (B, H, N)
    return patch_part(rows, grid, num_prefix)


def prefix_attention(attn: Tensor, num_prefix: int, query: int | None = 0) -> Tensor:
    """How much attention the query gives each prefix token: (B, H, N, N) -> (B, H, num_prefix)."""
    return _query_rows(attn, num_prefix, query)[..., :num_prefix]


def _query_rows(attn: Tensor, num_prefix: int, query: int | None) -> Tensor:
    """(B, H, N, N) -> (B, H, N): row q, or the mean of the patch queries' rows."""
    return attn[:, :, num_prefix:, :].mean(dim=2) if query is None else attn[:, :, query, :]
