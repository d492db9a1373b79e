"""What an image's layers add to the Viewer tab, for a model of any kind: the head grid's rows
(``LayerRow``: "L3", "1.2 SW"), a layer's own token grid when it is not the clickable one, its
window partition over the map with the query's window outlined (``LayerGrid.windows``), and the
words of titles, the query and the hover (``ViewWords``)."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QRectF
from PySide6.QtGui import QPainterPath

from vitviz.kindapi.protocol import LayerGrid, LayerRow
from vitviz.ui.canvas import ImageCanvas
from vitviz.ui.window_outline import partition_segments, window_segments
from vitviz.workers.messages import ImageResult, MapsResult

MEAN = -1


class LayerView:
    """Per image: its layers' rows, token grids and window outlines (built once each)."""

    def __init__(self, image: ImageResult) -> None:
        assert image.token_geometry is not None  # filled by ImageResult for every image
        self.image = image
        self.geometry = image.token_geometry
        self._partitions: dict[int, np.ndarray] = {}
        self._token_grids: dict[int, QPainterPath] = {}
        self._decorated = False  # a layer's own grid or windows are drawn over the map
        left, top, right, bottom = image.region  # the model input's place in the shown photo
        self._box = (left, top, right, bottom)
        gh, gw = self.geometry.grid
        cell = self.geometry.cell_pixels
        self._scale = np.array(  # shown pixels per input pixel, along x and y
            [(right - left) / (gw * cell), (bottom - top) / (gh * cell)]
        )

    # -- rows ----------------------------------------------------------------------------------
    def row(self, layer: int) -> LayerRow:
        rows = self.image.layer_rows
        return rows[min(max(layer, 0), len(rows) - 1)]

    def rows(self) -> tuple[list[str], list[int]]:
        """The head grid's row labels and tiles per row: one row per attention layer."""
        return [r.label for r in self.image.layer_rows], [r.heads for r in self.image.layer_rows]

    def stats_names(self) -> list[str] | None:
        """The head statistics' row names ("0.1"), None where the layers are numbered."""
        names = [r.name for r in self.image.layer_rows]
        return names if names and all(names) else None

    def layer(self, layer: int) -> LayerGrid:
        layers = self.geometry.layers
        return layers[min(max(layer, 0), len(layers) - 1)]

    # -- drawing -------------------------------------------------------------------------------
    def _to_pixels(self, segments: np.ndarray, layer: int) -> np.ndarray:
        left, top, right, bottom = self._box
        px = self.layer(layer).token_pixels * np.tile(self._scale, 2)  # (x, y, x, y)
        out = segments * px + np.array([left, top, left, top])
        out[:, 0::2] = np.minimum(out[:, 0::2], right)
        out[:, 1::2] = np.minimum(out[:, 1::2], bottom)
        return out

    def partition(self, layer: int) -> np.ndarray:
        """(K, 4) the layer's window partition and the image edges, in image pixels."""
        if layer not in self._partitions:
            ids = self.layer(layer).windows
            assert ids is not None
            self._partitions[layer] = self._to_pixels(partition_segments(ids), layer)
        return self._partitions[layer]

    def query_window(self, layer: int, token: int) -> np.ndarray:
        """(K, 4) the outline of ``token``'s window in the layer, in image pixels."""
        ids = self.layer(layer).windows
        assert ids is not None
        return self._to_pixels(window_segments(ids, token), layer)

    def token_rect(self, layer: int, token: int) -> QRectF:
        g = self.layer(layer)
        r, c = divmod(token, g.grid[1])
        sx, sy = g.token_pixels * self._scale
        left, top, right, bottom = self._box
        x0, y0 = left + c * sx, top + r * sy
        return QRectF(x0, y0, min(sx, right - x0), min(sy, bottom - y0))

    def token_grid(self, layer: int) -> QPainterPath:
        """The layer's token grid (coarser than the clickable cells), in image pixels."""
        if layer not in self._token_grids:
            left, top, right, bottom = self._box
            sx, sy = self.layer(layer).token_pixels * self._scale
            path = QPainterPath()
            for x in np.arange(left, right + 1e-6 * sx, sx):
                path.moveTo(float(x), top)
                path.lineTo(float(x), bottom)
            for y in np.arange(top, bottom + 1e-6 * sy, sy):
                path.moveTo(left, float(y))
                path.lineTo(right, float(y))
            self._token_grids[layer] = path
        return self._token_grids[layer]

    def _own_grid(self, layer: int) -> bool:
        """The layer's tokens are not the clickable cells, or it attends within windows."""
        g = self.layer(layer)
        return g.windows is not None or (g.grid, g.token_pixels) != (
            self.geometry.grid,
            self.geometry.cell_pixels,
        )

    def draw(self, view: ImageCanvas, maps: MapsResult, layer: int) -> None:
        """An attention map of a layer with tokens of its own: its token grid and window
        partition over ``view``, the query's window and token outlined; other maps (and layers
        on the clickable grid): the clickable grid, no windows."""
        if maps.params.method == "attention" and self._own_grid(layer):
            view.grid_lines.setPath(self.token_grid(layer))
            token = self.query_token(maps, layer)
            if self.layer(layer).windows is None:
                view.set_windows(None)
            else:
                query = None if token < 0 else self.query_window(layer, token)
                view.set_windows(self.partition(layer), query)
            if token >= 0:
                view.set_query_rect(self.token_rect(layer, token))
            self._decorated = True
        elif self._decorated:
            view.set_windows(None)
            view.grid_lines.setPath(self.token_grid(0))
            self._decorated = False

    # -- words ---------------------------------------------------------------------------------
    @staticmethod
    def query_token(maps: MapsResult, layer: int) -> int:
        tokens = maps.query_tokens
        return tokens[layer] if 0 <= layer < len(tokens) else -1

    @classmethod
    def queried(cls, maps: MapsResult, layer: int, query: tuple[int, int] | None) -> bool:
        """Whether ``layer`` reads the clicked cell: a query is given and the layer's query
        token is one (−1 there: its query stays the prefix token, a cross-attention's CLS)."""
        tokens = maps.query_tokens
        return query is not None and not (0 <= layer < len(tokens) and tokens[layer] < 0)

    def query_fields(
        self, query: tuple[int, int] | None, maps: MapsResult | None, layer: int
    ) -> dict[str, float]:
        """The fields of ``ViewWords``' query texts: the cell (row, col, index), its centre
        (y, x input pixels), the query's token in ``layer`` (trow, tcol) and its grid (th, tw)."""
        r, c = query if query is not None else (0, 0)
        gw = self.geometry.grid[1]
        p = self.geometry.cell_pixels
        g = self.layer(layer)
        token = -1 if maps is None else self.query_token(maps, layer)
        trow, tcol = divmod(token, g.grid[1]) if token >= 0 else (r, c)
        return {
            "row": r,
            "col": c,
            "index": r * gw + c,
            "y": (r + 0.5) * p,
            "x": (c + 0.5) * p,
            "trow": trow,
            "tcol": tcol,
            "th": g.grid[0],
            "tw": g.grid[1],
        }

    def query_text(self, query: tuple[int, int] | None) -> str:
        """The query label: no query (the CLS token, the mean, the average pool) or the cell."""
        return self.image.words.query_text(query, self.geometry)

    def attention_title(
        self, maps: MapsResult, layer: int, head: int, query: tuple[int, int] | None
    ) -> str:
        """e.g. "Attention · layer 3 of 12 · head 2 · query patch (4, 9)", "Attention · block
        1.2 SW-MSA (window 7, shift 3) · head 2 of 3 · query token (4, 9) of 56×56"."""
        words, row = self.image.words, self.row(layer)
        last = row.heads - 1
        heads = (
            "mean of heads"
            if head == MEAN
            else words.head.format(head=head, heads=row.heads, last=last)
        )
        if not self.queried(maps, layer, query):
            where = words.title_query_none
        else:
            where = words.title_query.format(**self.query_fields(query, maps, layer))
        return f"Attention · {row.title} · {heads} · {where}"

    def method_words(
        self, maps: MapsResult, method: str, query: tuple[int, int] | None
    ) -> str | None:
        """The words after a method's label where the kind words them (the token the method
        starts from, the grid it spans), None where the method's parameters are listed."""
        words = self.image.words
        if method in words.method_fixed:
            return words.method_fixed[method]
        if words.method_query is None or words.method_query_none is None:
            return None
        if query is None:
            return words.method_query_none
        last = len(self.geometry.layers) - 1
        return words.method_query.format(**self.query_fields(query, maps, last))

    def describe(self, info: tuple[int, int, float]) -> str:
        """A head-grid tile under the pointer: layer, head and value."""
        layer, head, value = info
        who = "mean of heads" if head == MEAN else f"head {head}"
        text = f"{self.row(layer).hover}, {who}"
        return text + (f": {value:.4g}" if np.isfinite(value) else "")
