"""``ClassAttentionLayers``: the members of the kinds whose maps come from class-attention
layers, beside the token-layout base (DESIGN §3).

Their networks hand every layer's attention over in one layout, (H, 1 + P, 1 + P) over [CLS,
patches], the rows of the tokens a layer does not update being the identity; the first
``config.self_depth`` layers are self-attention over the patches (the CLS is not there), the
others class attention (only the CLS queries). This says what follows: the layer rows ("SA 2",
"CA 0"), which query has a row in which layer (the head grid leaves the others blank), the
class-attention layers' head statistics and the npz's ``class_attention_layers``.
Torch-free at import.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from vitviz.kindapi.protocol import LayerRow, ViewWords
from vitviz.kinds.table_kind import TableKind

if TYPE_CHECKING:
    import numpy as np
    from PIL import Image

    from vitviz.kindapi.protocol import ImageNumbers, QueryMaps, Session
    from vitviz.kinds.vit.analysis import Analysis


def self_depth(analysis: Any) -> tuple[int, int]:
    """(self-attention layers, all attention layers) of ``analysis``'s model."""
    cfg = analysis.loaded.model.config
    return int(cfg.self_depth), int(cfg.depth)


def rows_without(analysis: Any, query: tuple[int, int] | None) -> list[int]:
    """The rows (of the kept layers) where ``query`` (None: the CLS) has no row of attention."""
    from vitviz.kinds.class_attention_methods import query_problem

    S, L = self_depth(analysis)
    return [
        row
        for row, layer in enumerate(analysis.layer_indices)
        if query_problem(S, L, layer, query) is not None
    ]


class ClassAttentionLayers:
    """Mixin before ``TokenLayoutKind``: the members a class-attention layout changes."""

    def readout(self, model: Any) -> Any:
        """head(norm(CLS)); before the CLS joins, of the mean patch token (DESIGN §5)."""
        from vitviz.kinds.readouts import class_attention_readout

        return class_attention_readout(model)

    def analysis_blocks(self, analysis: Any) -> None:
        """None: its blocks' outputs are laid out per block kind (self- or class-attention),
        which only its accessor knows; the feature views run that (DESIGN §5)."""
        return None

    def finish_analysis(self, analysis: Analysis) -> Analysis:
        from vitviz.kinds.class_attention_methods import class_layer_statistics

        S, _ = self_depth(analysis)
        stats = class_layer_statistics(
            analysis.attention,
            analysis.layer_indices,
            S,
            analysis.mean_distance,
            analysis.entropy,
            analysis.prefix_share,
        )
        analysis.mean_distance, analysis.entropy, analysis.prefix_share = stats
        return analysis

    def layer_rows(self, analysis: Analysis) -> tuple[LayerRow, ...]:
        """ "SA i" for the self-attention layers, "CA j" for the class-attention layers."""
        S, L = self_depth(analysis)
        rows = []
        for row, layer in zip(super().layer_rows(analysis), analysis.layer_indices, strict=True):
            if layer < S:
                label, what = f"SA {layer}", "self-attention over the patches (talking heads)"
            else:  # counted from 0, as every layer, block and head
                label, what = f"CA {layer - S}", "class attention (only the CLS queries)"
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
        words = ViewWords(query_none="CLS token (class-attention layers)")
        rows = self.layer_rows(session.analysis)
        return dataclasses.replace(numbers, attention=None, words=words, layer_rows=rows)

    def query_maps(self, session: Session, query: tuple[int, int] | None) -> QueryMaps:
        """The ViT's maps, NaN (blank) in the layers where the query has no row: the CLS in a
        self-attention layer, a patch in a class-attention layer."""
        import numpy as np

        from vitviz.imaging.colormaps import nice_levels

        maps = super().query_maps(session, query)
        blank = rows_without(session.analysis, query)
        head, mean = maps.head_maps.copy(), maps.mean_maps.copy()
        prefix = maps.prefix_attention.copy()
        head[blank], mean[blank], prefix[blank] = np.nan, np.nan, np.nan
        finite = head[np.isfinite(head)]  # none: the query has no row in any layer
        S, _ = self_depth(session.analysis)
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
        """The CLS's maps of every layer and head (``<stem>_heads.png``), the self-attention
        rows blank (the CLS is not there)."""
        import numpy as np

        from vitviz.pipeline.export import heads_figure

        maps = analysis.all_attention_maps(None).numpy().copy()
        maps[rows_without(analysis, None)] = np.nan
        return heads_figure(
            maps,
            maps.mean(axis=1),
            analysis,
            row_names=[r.label for r in self.layer_rows(analysis)],
            title="Attention of every layer and head",
            query="query CLS (class-attention layers; self-attention rows blank)",
            colormap=colormap,
            titled=titled,
        )

    # the window's head grid as it shows it (blank rows included), titled
    view_heads_picture = TableKind.view_heads_picture

    def heads_query_words(self, query: tuple[int, int] | None, analysis: Any = None) -> str:
        rows = "class-attention" if query is None else "self-attention"
        words = "query CLS" if query is None else f"query patch ({query[0]}, {query[1]})"
        return f"{words} ({rows} layers; the other rows blank)"

    def npz_arrays(self, analysis: Analysis) -> dict[str, np.ndarray]:
        import numpy as np

        S, _ = self_depth(analysis)
        out = super().npz_arrays(analysis)
        out["class_attention_layers"] = np.array(
            [layer >= S for layer in analysis.layer_indices], dtype=bool
        )
        return out
