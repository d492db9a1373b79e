"""Head statistics of a Swin per block and head: mean attention distance in input pixels and
row entropy, from Â_b (padding dropped, rows renormalised) window by window, O(N·n) per block.

A token of stage s covers patch·2^s input pixels a side; distances are between token centres of
the un-shifted grid, so a query's weight on a token that wrapped around in a shifted window
counts at its true distance.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from vitviz.kinds.staged_analysis import padded
from vitviz.kinds.swin.attention import windowed_attention
from vitviz.kinds.swin.windows import WindowLayout, slots_on

if TYPE_CHECKING:
    from vitviz.kinds.swin.analysis import SwinAnalysis


def token_pixels(patch_size: int, stage: int) -> int:
    """Side of the input square a token of ``stage`` stands for, in pixels."""
    return patch_size * 2**stage


def window_distances(layout: WindowLayout, pixels: float, like: Tensor) -> Tensor:
    """(windows, n, n) distance in pixels between the real tokens in each pair of slots (0 where
    either slot is padding)."""
    tokens = slots_on(layout, like.device)[2]  # (windows, n)
    W = layout.grid[1]
    safe = tokens.clamp_min(0)
    pos = torch.stack([safe // W, safe % W], dim=-1).to(like.dtype)  # (windows, n, 2)
    dist = torch.cdist(pos, pos) * pixels
    valid = (tokens >= 0).to(like.dtype)
    return dist * valid[:, :, None] * valid[:, None, :]


def block_statistics(attn: Tensor, layout: WindowLayout, pixels: float) -> tuple[Tensor, Tensor]:
    """(mean distance in pixels, entropy in nats) per head, each (heads,), means over the block's
    real query tokens. attn: (windows, heads, n, n) as captured."""
    a = windowed_attention(attn, layout)  # (windows, heads, n, n), padding rows zero
    queries = layout.grid[0] * layout.grid[1]
    dist = window_distances(layout, pixels, a)  # (windows, n, n)
    distance = torch.einsum("whab,wab->h", a, dist) / queries
    tiny = torch.finfo(a.dtype).tiny
    entropy = -(a * (a + tiny).log()).sum(dim=(0, 2, 3)) / queries
    return distance, entropy


def swin_head_statistics(
    attentions: Sequence[Tensor],
    layouts: Sequence[WindowLayout],
    block_stages: Sequence[int],
    patch_size: int,
) -> tuple[list[Tensor], list[Tensor]]:
    """Per block (heads,) mean attention distance in input pixels and (heads,) entropy; blocks of
    different stages have different numbers of heads, hence lists."""
    distances, entropies = [], []
    for attn, layout, stage in zip(attentions, layouts, block_stages, strict=True):
        d, e = block_statistics(attn, layout, token_pixels(patch_size, stage))
        distances.append(d)
        entropies.append(e)
    return distances, entropies


def padded_head_statistics(analysis: SwinAnalysis) -> dict[str, np.ndarray]:
    """``ModelKind.head_statistics`` of a Swin: distance and entropy (L, most heads) with NaN
    beyond a block's heads; prefix share all NaN (a Swin has no prefix tokens)."""
    a = analysis
    dist, ent = swin_head_statistics(a.attentions, a.layouts, a.block_stages, a.patch_size)
    most = max(int(t.shape[1]) for t in a.attentions)
    return {
        "distance": padded([d.float().cpu().numpy() for d in dist], most),
        "entropy": padded([e.float().cpu().numpy() for e in ent], most),
        "prefix_share": np.full((len(a.attentions), most), np.nan, dtype=np.float32),
    }
