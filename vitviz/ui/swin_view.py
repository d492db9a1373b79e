"""What a Swin adds to the Viewer tab: its blocks as the head grid's rows ("1.2 SW"), the
selected block's (shifted) window partition over the map with the query's window outlined, and
titles that name the block, W-MSA or SW-MSA, the head and the query token."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QRectF
from PySide6.QtGui import QPainterPath

from vitviz.ui.canvas import ImageCanvas
from vitviz.ui.window_outline import partition_segments, window_segments
from vitviz.workers.messages import SwinImageResult, SwinMapsResult

MEAN = -1


class SwinView:
    """Per image: the blocks' labels and heads, and their window outlines (built once each)."""

    def __init__(self, image: SwinImageResult) -> None:
        self.image = image
        self._partitions: dict[int, np.ndarray] = {}
        self._token_grids: dict[int, QPainterPath] = {}
        left, top, right, bottom = image.region  # the model input's place in the shown photo
        self._box = (left, top, right, bottom)
        gh, gw = image.grid
        self._scale = np.array(  # shown pixels per input pixel, along x and y
            [(right - left) / (gw * image.patch_size), (bottom - top) / (gh * image.patch_size)]
        )

    def rows(self) -> tuple[list[str], list[int]]:
        """The head grid's row labels and tiles per row: one row per block."""
        return [b.label for b in self.image.blocks], [b.heads for b in self.image.blocks]

    def _to_pixels(self, segments: np.ndarray, block: int) -> np.ndarray:
        left, top, right, bottom = self._box
        px = self.image.blocks[block].token_pixels * np.tile(self._scale, 2)  # (x, y, x, y)
        out = segments * px + np.array([left, top, left, top])
        out[:, 0::2] = np.minimum(out[:, 0::2], right)
        out[:, 1::2] = np.minimum(out[:, 1::2], bottom)
        return out

    def partition(self, block: int) -> np.ndarray:
        """(K, 4) the block's window partition and the image edges, in image pixels."""
        if block not in self._partitions:
            ids = self.image.window_ids[block]
            self._partitions[block] = self._to_pixels(partition_segments(ids), block)
        return self._partitions[block]

    def query_window(self, block: int, token: int) -> np.ndarray:
        """(K, 4) the outline of ``token``'s window in the block, in image pixels."""
        return self._to_pixels(window_segments(self.image.window_ids[block], token), block)

    def token_rect(self, block: int, token: int) -> QRectF:
        info = self.image.blocks[block]
        r, c = divmod(token, info.grid[1])
        sx, sy = info.token_pixels * self._scale
        left, top, right, bottom = self._box
        x0, y0 = left + c * sx, top + r * sy
        return QRectF(x0, y0, min(sx, right - x0), min(sy, bottom - y0))

    def token_grid(self, block: int) -> QPainterPath:
        """The block's token grid (coarser than the first stage's patches), in image pixels."""
        if block not in self._token_grids:
            left, top, right, bottom = self._box
            sx, sy = self.image.blocks[block].token_pixels * self._scale
            path = QPainterPath()
            for x in np.arange(left, right + 1e-6 * sx, sx):
                path.moveTo(float(x), top)
                path.lineTo(float(x), bottom)
            for y in np.arange(top, bottom + 1e-6 * sy, sy):
                path.moveTo(left, float(y))
                path.lineTo(right, float(y))
            self._token_grids[block] = path
        return self._token_grids[block]

    def draw(self, view: ImageCanvas, maps: SwinMapsResult, block: int) -> None:
        """The block's token grid and window partition over ``view``, the query's window and
        token outlined (the attention map); other methods' maps: the first stage's grid."""
        if maps.params.method != "attention":
            view.set_windows(None)
            view.grid_lines.setPath(self.token_grid(0))
            return
        view.grid_lines.setPath(self.token_grid(block))
        token = maps.query_tokens[block] if maps.query_tokens else -1
        query = None if token < 0 else self.query_window(block, token)
        view.set_windows(self.partition(block), query)
        if token >= 0:
            view.set_query_rect(self.token_rect(block, token))

    def query_text(self, query: tuple[int, int] | None) -> str:
        if query is None:
            return "average pool (every token)"
        p = self.image.patch_size
        return f"point y {(query[0] + 0.5) * p:.0f}, x {(query[1] + 0.5) * p:.0f} px"

    def title(self, maps: SwinMapsResult, block: int, head: int, label: str) -> str:
        """e.g. "Attention · block 1.2 SW-MSA (window 7, shift 3) · head 2 of 3 · query token
        (4, 9) of 56×56"."""
        info = self.image.blocks[block]
        kind = "SW-MSA" if info.shifted else "W-MSA"
        where = f"block {info.stage + 1}.{info.index + 1} {kind} (window {info.window[0]}"
        where += f", shift {info.shift[0]})" if info.shifted else ")"
        token = maps.query_tokens[block] if maps.query_tokens else -1
        if token < 0:
            query = "query: average pool"
        else:
            r, c = divmod(token, info.grid[1])
            query = f"query token ({r}, {c}) of {info.grid[0]}×{info.grid[1]}"
        if maps.params.method == "attention":
            heads = "mean of heads" if head == MEAN else f"head {head + 1} of {info.heads}"
            return f"Attention · {where} · {heads} · {query}"
        last = self.image.blocks[-1]
        if maps.params.method == "gradcam":
            return f"{label} · stage {last.stage + 1}'s {last.grid[0]}×{last.grid[1]} tokens"
        token = maps.query_tokens[-1] if maps.query_tokens else -1
        if token < 0:
            start = "from the average pool"
        else:
            r, c = divmod(token, last.grid[1])
            start = f"from stage {last.stage + 1}'s token ({r}, {c})"
        first = self.image.blocks[0]
        return f"{label} · {start} · over stage 1's {first.grid[0]}×{first.grid[1]} tokens"

    def describe(self, info: tuple[int, int, float]) -> str:
        """A head-grid tile under the pointer: block, head and value."""
        block, head, value = info
        who = "mean of heads" if head == MEAN else f"head {head + 1}"
        text = f"block {self.image.blocks[block].label}, {who}"
        return text + (f": {value:.4g}" if np.isfinite(value) else "")
