"""``ClassAttentionLayers``: the members of the kinds whose maps come from class-attention
layers, beside the token-layout base (DESIGN §3).

Their networks hand every layer's attention over in one layout, (H, 1 + P, 1 + P) over [CLS,
patches], the rows of the tokens a layer does not update being the identity; the first
``config.self_depth`` layers are self-attention over the patches (the CLS is not there), the
others class attention (only the CLS queries). This says what follows beyond ``LateClsLayers``:
which query has a row in which layer (the head grid leaves the others blank), the
class-attention layers' head statistics and the npz's ``class_attention_layers``.
Torch-free at import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vitviz.kinds.late_cls import LateClsLayers

if TYPE_CHECKING:
    import numpy as np

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


class ClassAttentionLayers(LateClsLayers):
    """Mixin before ``TokenLayoutKind``: the members a class-attention layout changes (its
    self-attention layers the early ones, ``LateClsLayers``)."""

    EARLY_ROWS = ("SA", "self-attention over the patches (talking heads)")
    LATE_ROWS = ("CA", "class attention (only the CLS queries)")
    CLS_QUERY = "CLS token (class-attention layers)"
    CLS_HEADS = "query CLS (class-attention layers; self-attention rows blank)"

    def early_layers(self, analysis: Any) -> tuple[int, int]:
        return self_depth(analysis)

    def blank_rows(self, analysis: Any, query: tuple[int, int] | None) -> list[int]:
        """The CLS's in the self-attention layers, a patch's in the class-attention ones."""
        return rows_without(analysis, query)

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
