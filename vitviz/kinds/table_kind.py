"""``TableKind``: ``KindBase`` with the engine's members a kind can make from its own members
through the method table and the pipeline (DESIGN §3): the window's numbers, a method's map,
faithfulness, the npz export and the head grid's picture. The staged kinds' base stands on it,
and a new kind can. Torch-free at import: every member imports what it needs when called.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from vitviz.kindapi.base import KindBase

if TYPE_CHECKING:
    from pathlib import Path

    import numpy as np
    from PIL import Image

    from vitviz.kindapi.protocol import FaithfulnessReport, ImageNumbers, Loaded, Session


def unavailable_methods(loaded: Loaded, head: bool) -> dict[str, str]:
    """{method name: why it can't run on ``loaded``'s model} over the whole method table
    (``head``: the model has a classification head and classes)."""
    from vitviz.explain.methods import all_methods

    reasons = {
        m.name: m.unavailable_on(loaded.model, head, kind=loaded.kind) for m in all_methods()
    }
    return {name: why for name, why in reasons.items() if why is not None}


class TableKind(KindBase):
    """A kind whose window numbers, maps, curves, npz and head picture come from its own
    members (``layer_rows``, ``head_statistics``, ``token_geometry``, ``query_maps``,
    ``npz_arrays``) through the method table and the pipeline."""

    def image_numbers(self, session: Session) -> ImageNumbers:
        """The predictions, head statistics, layer rows and token geometry; every query goes to
        ``query_maps`` (the thumbnails at the first layer's grid)."""
        import numpy as np

        from vitviz.explain.methods import ignored_parameters
        from vitviz.kindapi.protocol import ImageNumbers

        loaded, a = session.loaded, session.analysis
        head = self.has_head(loaded)
        rows, stats, geometry = self.layer_rows(a), self.head_statistics(a), self.token_geometry(a)
        thumb_grid, thumb_pixels = self.thumbnails(a)
        return ImageNumbers(
            input_pixels=np.ascontiguousarray(a.pixels, dtype=np.uint8),
            grid=tuple(geometry.grid),
            patch_size=geometry.cell_pixels,
            num_prefix_tokens=geometry.num_prefix_tokens,
            num_layers=len(rows),
            num_heads=max(r.heads for r in rows),
            class_names=list(loaded.class_names) if head else [],
            probs=a.probs.float().cpu().numpy(),
            logits=a.logits.float().cpu().numpy(),
            top_class=self.default_class(session),
            mean_distance=stats["distance"],
            entropy=stats["entropy"],
            prefix_share=stats["prefix_share"],
            token_norms=np.zeros((len(rows), 0), dtype=np.float32),
            device=str(next(loaded.model.parameters()).device),
            attention=None,
            unavailable=unavailable_methods(loaded, head and bool(loaded.class_names)),
            ignored_params=ignored_parameters(self),
            thumb_grid=thumb_grid,
            thumb_pixels=thumb_pixels,
            layer_rows=rows,
            token_geometry=geometry,
            words=self.view_words(a),
        )

    def method_map(
        self,
        session: Session,
        method: str,
        query: tuple[int, int] | None,
        target_class: int | None,
        params: Mapping[str, Any],
    ) -> np.ndarray:
        """The table's map through the method table (its checks, then this kind's version)."""
        from vitviz.explain.methods import get_method

        target = self.default_class(session) if target_class is None else target_class
        m = get_method(method)
        out = m(session.analysis, query, target if target >= 0 else None, dict(params),
                strict=False)  # fmt: skip
        return out.numpy()

    def evaluate_faithfulness(
        self,
        session: Session,
        names: Sequence[str],
        *,
        steps: int,
        mask: np.ndarray | None,
        name: str,
        params: Mapping[str, Mapping[str, Any]],
    ) -> FaithfulnessReport:
        from vitviz.explain.faithfulness import evaluate_methods

        if not self.has_head(session.loaded):
            raise ValueError("faithfulness needs a classification head, and this model has none")
        return evaluate_methods(
            session.analysis, list(names), steps=steps, mask=mask, name=name, params=params
        )

    def export_npz(
        self,
        session: Session,
        path: Path,
        method: str,
        params: Mapping[str, Any],
        target_class: int | None,
    ) -> Path:
        """``vitviz-cli explain``'s npz with the shown method (its parameters, the chosen
        class); rollout always."""
        from vitviz.explain.methods import get_method
        from vitviz.pipeline.export import MapSettings, compute_maps, write_npz

        loaded, a = session.loaded, session.analysis
        m = get_method(method)
        usable = m.unavailable_on(loaded.model, self.has_head(loaded), kind=self) is None
        methods = (method,) if usable and method not in ("rollout", "attention") else ()
        layers, heads = self.parameter_bounds(loaded.model)
        given = {method: params} if usable else {}
        values = {
            n: get_method(n).values_for(self, given.get(n), layers, heads, strict=False)
            for n in ("rollout", *methods)
        }
        settings = MapSettings(methods=methods, params=values, target_class=target_class)
        return write_npz(a, compute_maps(a, settings), path, loaded.class_names)

    HEADS_TITLE = "Attention of every layer and head"

    def heads_query_words(self, query: tuple[int, int] | None, analysis: Any = None) -> str:
        """The head-grid picture's words for the query (None: no cell clicked) on ``analysis``
        (the model's own: a kind whose query without a click differs per model reads it)."""
        return "query: no cell" if query is None else f"query cell {query}"

    def view_heads_picture(
        self,
        session: Session,
        query: tuple[int, int] | None,
        colormap: str,
        opacity: float,
        per_head: bool,
    ) -> Image.Image:
        """The query's thumbnails (every layer and head, as the head grid shows them), titled."""
        from vitviz.pipeline.export import heads_figure

        shown = self.query_maps(session, query)
        return heads_figure(
            shown.head_maps,
            shown.mean_maps,
            session.analysis,
            row_names=[r.label for r in self.layer_rows(session.analysis)],
            title=self.HEADS_TITLE,
            query=self.heads_query_words(query, session.analysis),
            colormap=colormap,
            opacity=opacity,
            per_head=per_head,
        )
