"""``LateClsLayers``: the members of the kinds whose CLS token joins after their first layers
(CaiT's and XCiT's class attention, ConViT's plain blocks after the GPSA ones), beside the
token-layout base (DESIGN §3).

Their networks hand every layer's attention over in one layout, (H, 1 + P, 1 + P) over [CLS,
patches]; the first ``early_layers`` layers are over the patches alone (the CLS is not there,
nor a CLS key). This says what follows: the layer rows ("SA 2", "CA 0"), the query maps and the
heads picture blank where a query has no row, no prefix share in the early layers, and the
readout of the CLS (or, before it joins, the mean patch token). Torch-free at import.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from vitviz.kindapi.protocol import LayerRow, ViewWords
from vitviz.kinds.table_kind import TableKind

if TYPE_CHECKING:
    from PIL import Image

    from vitviz.kindapi.protocol import ImageNumbers, QueryMaps, Session
    from vitviz.kinds.vit.analysis import Analysis


class LateClsLayers:
    """Mixin before ``TokenLayoutKind``: ``EARLY_ROWS`` and ``LATE_ROWS`` are the (label, words)
    of a layer before and after the CLS joins; ``CLS_QUERY`` the view's words of the CLS query;
    ``CLS_HEADS`` the heads picture's."""

    EARLY_ROWS: tuple[str, str]
    LATE_ROWS: tuple[str, str]
    CLS_QUERY: str
    CLS_HEADS: str

    def early_layers(self, analysis: Any) -> tuple[int, int]:
        """(the layers before the CLS joins, all attention layers) of ``analysis``'s model."""
        raise NotImplementedError

    def blank_rows(self, analysis: Any, query: tuple[int, int] | None) -> list[int]:
        """The rows (of the kept layers) where ``query`` (None: the CLS) has no row of
        attention: the early layers' for the CLS."""
        S, _ = self.early_layers(analysis)
        if query is not None:
            return []
        return [row for row, layer in enumerate(analysis.layer_indices) if layer < S]

    def readout(self, model: Any) -> Any:
        """head(norm(CLS)); before the CLS joins, of the mean patch token (DESIGN §5)."""
        from vitviz.kinds.readouts import class_attention_readout

        return class_attention_readout(model)

    def analysis_blocks(self, analysis: Any) -> None:
        """None: its blocks' outputs are laid out per block kind (before or after the CLS
        joins), which only its accessor knows; the feature views run that (DESIGN §5)."""
        return None

    def layer_rows(self, analysis: Analysis) -> tuple[LayerRow, ...]:
        """ "SA i" for the early layers, "CA j" for the later (``EARLY_ROWS``, ``LATE_ROWS``),
        each counted from 0, as every layer, block and head."""
        S, L = self.early_layers(analysis)
        rows = []
        for row, layer in zip(super().layer_rows(analysis), analysis.layer_indices, strict=True):
            if layer < S:
                label, what = f"{self.EARLY_ROWS[0]} {layer}", self.EARLY_ROWS[1]
            else:
                label, what = f"{self.LATE_ROWS[0]} {layer - S}", self.LATE_ROWS[1]
            rows.append(
                dataclasses.replace(
                    row,
                    label=label,
                    tooltip=f"layer {layer} of 0–{L - 1}: {what}",
                    title=f"layer {layer} of 0–{L - 1} ({label}: {what})",
                    hover=f"layer {layer} ({label})",
                    selector=f" · {label}",
                )
            )
        return tuple(rows)

    def image_numbers(self, session: Session) -> ImageNumbers:
        # attention None: the window asks query_maps, which blanks the rows a query lacks
        numbers = super().image_numbers(session)
        words = ViewWords(query_none=self.CLS_QUERY)
        rows = self.layer_rows(session.analysis)
        return dataclasses.replace(numbers, attention=None, words=words, layer_rows=rows)

    def query_maps(self, session: Session, query: tuple[int, int] | None) -> QueryMaps:
        """The ViT's maps, NaN (blank) in the layers where the query has no row
        (``blank_rows``), the prefix share NaN in the early layers (no CLS key there)."""
        import numpy as np

        from vitviz.imaging.colormaps import nice_levels

        maps = super().query_maps(session, query)
        blank = self.blank_rows(session.analysis, query)
        head, mean = maps.head_maps.copy(), maps.mean_maps.copy()
        prefix = maps.prefix_attention.copy()
        head[blank], mean[blank], prefix[blank] = np.nan, np.nan, np.nan
        finite = head[np.isfinite(head)]  # none: the query has no row in any layer
        S, _ = self.early_layers(session.analysis)
        layers = session.analysis.layer_indices
        prefix[[row for row, layer in enumerate(layers) if layer < S]] = np.nan  # no CLS there
        return dataclasses.replace(
            maps,
            head_maps=head,
            mean_maps=mean,
            layer_maps=tuple(head),
            prefix_attention=prefix,
            levels=nice_levels(np.array([finite.min(), finite.max()]))
            if finite.size
            else (0.0, 1.0),
        )

    def heads_picture(self, analysis: Analysis, colormap: str, titled: bool) -> Image.Image:
        """The CLS's maps of every layer and head (``<stem>_heads.png``), the early rows blank
        (the CLS is not there)."""
        import numpy as np

        from vitviz.pipeline.export import heads_figure

        maps = analysis.all_attention_maps(None).numpy().copy()
        maps[self.blank_rows(analysis, None)] = np.nan
        return heads_figure(
            maps,
            maps.mean(axis=1),
            analysis,
            row_names=[r.label for r in self.layer_rows(analysis)],
            title="Attention of every layer and head",
            query=self.CLS_HEADS,
            colormap=colormap,
            titled=titled,
        )

    # the window's head grid as it shows it (blank rows included), titled
    view_heads_picture = TableKind.view_heads_picture
