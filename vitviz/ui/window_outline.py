"""A layer's window partition (``LayerGrid.windows``, e.g. a Swin block's) as line segments for
the map view (numpy only).

``ids`` (H, W) is the window index of every token as the image sees it (a window that wraps
around the cyclic shift shows in pieces). Segments are (x0, y0, x1, y1) in token units: a
partition line wherever two neighbouring tokens lie in different windows, plus the image edges;
the query's window outlined where its tokens meet others or the edge.
"""

from __future__ import annotations

import numpy as np


def _edges(differs_v: np.ndarray, differs_h: np.ndarray) -> np.ndarray:
    """Unit segments: vertical ones at x = c where ``differs_v`` (H, W+1), horizontal ones at
    y = r where ``differs_h`` (H+1, W). (K, 4) float."""
    rv, cv = np.nonzero(differs_v)
    rh, ch = np.nonzero(differs_h)
    vertical = np.stack([cv, rv, cv, rv + 1], axis=1)
    horizontal = np.stack([ch, rh, ch + 1, rh], axis=1)
    return np.concatenate([vertical, horizontal]).astype(np.float64)


def _boundaries(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where neighbours differ, with the outside (−1) beyond the edges: (H, W+1), (H+1, W)."""
    padded = np.pad(labels, 1, constant_values=-1)
    differs_v = padded[1:-1, 1:] != padded[1:-1, :-1]  # between columns c-1 and c
    differs_h = padded[1:, 1:-1] != padded[:-1, 1:-1]  # between rows r-1 and r
    return differs_v, differs_h


def partition_segments(ids: np.ndarray) -> np.ndarray:
    """(K, 4) unit segments of the window partition and the image edges, in token units."""
    ids = np.asarray(ids)
    return merge(_edges(*_boundaries(ids)))


def window_segments(ids: np.ndarray, token: int) -> np.ndarray:
    """(K, 4) unit segments outlining the window of ``token`` (row-major index)."""
    ids = np.asarray(ids)
    inside = (ids == ids.reshape(-1)[token]).astype(np.int64)
    return merge(_edges(*_boundaries(np.where(inside > 0, 1, -1))))


def merge(segments: np.ndarray) -> np.ndarray:
    """Join collinear unit segments that touch (fewer, longer lines to stroke)."""
    out: list[list[float]] = []
    vertical = segments[segments[:, 0] == segments[:, 2]]
    horizontal = segments[segments[:, 1] == segments[:, 3]]
    for segs, fixed, start, end in ((vertical, 0, 1, 3), (horizontal, 1, 0, 2)):
        order = np.lexsort((segs[:, start], segs[:, fixed]))
        for s in segs[order]:
            last = out[-1] if out else None
            if (
                last is not None
                and last[fixed] == s[fixed]
                and last[fixed + 2] == s[fixed + 2]
                and last[end] == s[start]
            ):
                last[end] = s[end]
            else:
                out.append(list(s))
    return np.asarray(out, dtype=np.float64).reshape(-1, 4)
