"""Head statistics of a pyramid ViT per block and head, from A_b (heads, N_s, M_b).

Mean attention distance: Σ_m A[q, m]·‖pos_q − pos_m‖ in input pixels, averaged over the
queries; pos_q the centre of query token q (a token of stage s is ``stage_pixels[s]`` wide),
pos_m the centre of the rectangle of tokens key m is made of. Entropy: of each row over the
M_b keys, in nats, averaged over the queries. No prefix tokens: the prefix share is NaN. A PVT
v1's last-stage blocks (a CLS first): the queries are the grid's tokens, the entropy is of their
whole rows (the CLS key too), the distance over the grid's keys (the CLS has no place) and the
prefix share the mean of the rows' CLS entry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from vitviz.kinds.pyramid.reduction import Reduction, identity
from vitviz.kinds.staged_analysis import padded
from vitviz.kinds.staged_head_stats import row_entropy

if TYPE_CHECKING:
    from vitviz.kinds.pyramid.analysis import PyramidAnalysis


def block_statistics(
    attn: Tensor,
    keys: Reduction,
    pixels: int,
    queries: tuple[tuple[int, int], int] | None = None,
) -> tuple[Tensor, Tensor]:
    """(mean distance in pixels, entropy in nats) per head, each (heads,). ``pixels``: a token
    of the keys' fine grid; ``queries``: the queries' (grid, pixels) when they are not that
    grid (a Hiera pooling block's queries, one stage coarser)."""
    a = attn.double()
    grid, px = queries if queries is not None else (keys.fine, pixels)
    q_pos = identity(tuple(grid)).centres(px).to(a.device)  # (N, 2)
    k_pos = keys.centres(pixels).to(a.device)  # (M, 2)
    dist = torch.cdist(q_pos, k_pos)  # (N, M)
    distance = (a * dist).sum(dim=-1).mean(dim=-1)
    entropy = row_entropy(a)
    return distance, entropy


def head_statistics(analysis: PyramidAnalysis) -> dict[str, np.ndarray]:
    """``ModelKind.head_statistics``: distance and entropy (L, most heads), NaN beyond a
    block's heads; prefix share all NaN (no prefix tokens)."""
    a = analysis
    dist, ent = [], []
    most = max(int(t.shape[0]) for t in a.attentions)
    share = np.full((len(a.attentions), most), np.nan, dtype=np.float32)
    for b, (attn, keys, s) in enumerate(zip(a.attentions, a.keys, a.block_stages, strict=True)):
        key_px = a.stage_pixels[a.stage_grids.index(tuple(keys.fine))]
        P = a.prefix_of(b)
        rows = attn[:, P:]  # the grid's queries
        d, _ = block_statistics(rows[..., P:], keys, key_px, (a.stage_grids[s], a.stage_pixels[s]))
        r = rows.double()
        e = row_entropy(r)
        if P:
            share[b, : attn.shape[0]] = r[..., :P].sum(dim=-1).mean(dim=-1).float().cpu().numpy()
        dist.append(d.float().cpu().numpy())
        ent.append(e.float().cpu().numpy())
    return {
        "distance": padded(dist, most),
        "entropy": padded(ent, most),
        "prefix_share": share,
    }
