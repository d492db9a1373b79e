"""The window partition the map view outlines: lines at δ + k·w and the image edges, the query's
window (in pieces when it wraps around the cyclic shift) outlined where it meets the others."""

from __future__ import annotations

import numpy as np

from vitviz.kinds.swin.attention import query_window, window_ids
from vitviz.kinds.swin.windows import WindowLayout
from vitviz.ui.window_outline import partition_segments, window_segments


def _lines(segments: np.ndarray, vertical: bool) -> set[float]:
    axis = 0 if vertical else 1
    chosen = segments[segments[:, axis] == segments[:, axis + 2]]
    return set(chosen[:, axis].tolist())


def _layout(shift: int) -> WindowLayout:
    return WindowLayout(grid=(8, 12), window=(4, 4), shift=(shift, shift), padded=(8, 12))


def test_shifted_partition_lines_at_delta_plus_k_w_and_the_edges() -> None:
    segments = partition_segments(window_ids(_layout(2)).numpy())
    assert _lines(segments, vertical=True) == {0.0, 2.0, 6.0, 10.0, 12.0}
    assert _lines(segments, vertical=False) == {0.0, 2.0, 6.0, 8.0}
    full = partition_segments(window_ids(_layout(0)).numpy())
    assert _lines(full, vertical=True) == {0.0, 4.0, 8.0, 12.0}
    total = np.abs(full[:, 2] - full[:, 0]).sum() + np.abs(full[:, 3] - full[:, 1]).sum()
    assert total == 4 * 8 + 3 * 12  # merged: every line spans the image once


def test_query_window_outline_bounds_exactly_its_tokens() -> None:
    layout = _layout(2)
    ids = window_ids(layout).numpy()
    token = 0  # top-left corner: its window wraps to the other three corners
    inside = query_window(layout, token).numpy()
    assert inside[0, 0] and inside[-1, -1] and inside[0, -1] and inside[-1, 0]
    segments = window_segments(ids, token)
    # every unit edge of the outline has the window on exactly one side
    for x0, y0, x1, y1 in segments.tolist():
        if x0 == x1:  # vertical, between columns x0 - 1 and x0
            for y in range(int(y0), int(y1)):
                left = inside[y, int(x0) - 1] if x0 > 0 else False
                right = inside[y, int(x0)] if x0 < inside.shape[1] else False
                assert left != right
        else:
            for x in range(int(x0), int(x1)):
                up = inside[int(y0) - 1, x] if y0 > 0 else False
                down = inside[int(y0), x] if y0 < inside.shape[0] else False
                assert up != down
    perimeter = np.abs(segments[:, 2] - segments[:, 0]).sum()
    perimeter += np.abs(segments[:, 3] - segments[:, 1]).sum()
    assert perimeter == 4 * 2 * 4  # four 2×2 corner pieces, each with perimeter 8
