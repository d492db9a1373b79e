"""A Swin block's window attention in image coordinates (un-shifted, un-padded).

For block b on an H × W grid with window (wh, ww) and shift δ, token (y, x) sits at
((y − δ) mod H_p, (x − δ) mod W_p) of the padded, shifted map (``WindowLayout.token_slots``).
Â_b[h, i, j] is the captured weight when tokens i and j share a window and 0 otherwise; padding
slots are dropped and each row renormalised over the real tokens. Nothing here builds Â_b densely
except ``image_attention`` (for small grids): a query's row costs O(n), a rollout step O(N·n).
"""

from __future__ import annotations

import torch
from torch import Tensor

from vitviz.kinds.swin.windows import WindowLayout, slots_on

DENSE_LIMIT = 4096  # tokens: beyond this, ``image_attention`` refuses (use rows or windows)


def _check(attn: Tensor, layout: WindowLayout) -> None:
    n = layout.window_area
    if attn.ndim != 4 or attn.shape[0] != layout.num_windows or attn.shape[-2:] != (n, n):
        raise ValueError(
            f"attention {tuple(attn.shape)} does not fit the layout "
            f"({layout.num_windows} windows of {n} tokens)"
        )


def real_slots(layout: WindowLayout, device: torch.device | None = None) -> Tensor:
    """(windows, n) bool: which window slots hold a real token (not padding)."""
    return slots_on(layout, device or "cpu")[2] >= 0


def windowed_attention(attn: Tensor, layout: WindowLayout, renormalise: bool = True) -> Tensor:
    """(windows, heads, n, n) captured attention -> the same with padding keys dropped (rows
    renormalised over the real keys when ``renormalise``) and padding queries' rows zeroed.
    This is Â_b restricted to its non-zero blocks, in the model's window order."""
    _check(attn, layout)
    valid = real_slots(layout, attn.device).to(attn.dtype)  # (windows, n)
    kept = attn * valid[:, None, None, :]
    if renormalise:
        kept = kept / kept.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(attn.dtype).tiny)
    return kept * valid[:, None, :, None]


def query_row(attn: Tensor, layout: WindowLayout, token: int) -> Tensor:
    """Row ``token`` of Â_b: (heads, H·W), zero outside the query's window. O(n) work."""
    _check(attn, layout)
    H, W = layout.grid
    if not 0 <= token < H * W:
        raise ValueError(f"token {token} out of range for the {H}×{W} grid")
    win, slot, tokens = slots_on(layout, attn.device)
    w, a = int(win[token]), int(slot[token])
    tokens = tokens[w]  # (n,) token of each slot, −1: padding
    valid = tokens >= 0
    weights = attn[w, :, a, :][:, valid]  # (heads, k)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    row = attn.new_zeros(attn.shape[1], H * W)
    row[:, tokens[valid]] = weights
    return row


def image_attention(attn: Tensor, layout: WindowLayout, renormalise: bool = True) -> Tensor:
    """Dense Â_b (heads, N, N), N = H·W, for small grids (tests, exports of a small stage);
    ``renormalise=False``: the captured weights as they are (the mass on padding left out)."""
    H, W = layout.grid
    N = H * W
    if N > DENSE_LIMIT:
        raise ValueError(f"a dense {N}×{N} attention is too large; use query_row")
    kept = windowed_attention(attn, layout, renormalise)
    tokens = slots_on(layout, attn.device)[2]  # (windows, n)
    heads = attn.shape[1]
    dense = attn.new_zeros(heads, N, N)
    for w in range(layout.num_windows):
        valid = tokens[w] >= 0
        idx = tokens[w][valid]
        block = kept[w][:, valid][:, :, valid]  # (heads, k, k)
        dense[:, idx[:, None], idx[None, :]] = block
    return dense


def to_slots(values: Tensor, layout: WindowLayout) -> Tensor:
    """(..., N) per-token values -> (..., windows, n) in window order; 0 in padding slots."""
    tokens = slots_on(layout, values.device)[2]
    out = values[..., tokens.clamp_min(0)]
    return out * (tokens >= 0).to(values.dtype)


def from_slots(slots: Tensor, layout: WindowLayout) -> Tensor:
    """(..., windows, n) window-ordered values -> (..., N) per token (padding slots dropped)."""
    win, slot, _ = slots_on(layout, slots.device)
    return slots[..., win, slot]


def window_ids(layout: WindowLayout) -> Tensor:
    """(H, W) window index of every token: the (shifted) partition as the image sees it; a
    window that wraps around the cyclic shift appears in up to four pieces."""
    win, _ = layout.token_slots()
    return win.reshape(layout.grid)


def query_window(layout: WindowLayout, token: int) -> Tensor:
    """(H, W) bool: the tokens that share ``token``'s window (what its attention row covers)."""
    ids = window_ids(layout)
    H, W = layout.grid
    if not 0 <= token < H * W:
        raise ValueError(f"token {token} out of range for the {H}×{W} grid")
    return ids == ids.flatten()[token]


def token_at(layout: WindowLayout, token_pixels: float, point: tuple[float, float]) -> int:
    """The token of the block's grid covering ``point`` (y, x) in input pixels, each token
    covering ``token_pixels`` a side (patch·2^stage); points beyond the grid go to its edge."""
    H, W = layout.grid
    row = min(max(int(point[0] // token_pixels), 0), H - 1)
    col = min(max(int(point[1] // token_pixels), 0), W - 1)
    return row * W + col


def covering_tokens(cells: int, cell_pixels: float, token_pixels: float, tokens: int) -> Tensor:
    """(cells,) int64: for each of ``cells`` cells ``cell_pixels`` wide along one side, the token
    (``tokens`` of them, ``token_pixels`` wide) covering the cell's centre, as ``token_at``
    picks it; a centre beyond the last token goes to the last (nearest resampling of a grid)."""
    centres = (torch.arange(cells, dtype=torch.float64) + 0.5) * cell_pixels
    return torch.clamp((centres // token_pixels).long(), max=tokens - 1)
