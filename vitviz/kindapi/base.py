"""``KindBase``: the members of ``ModelKind`` most kinds leave as they are, written once
(DESIGN §3). A kind subclasses it (or a family's base on top of it, ``vitviz.kinds.token_layout``,
``vitviz.kinds.staged``) and writes what is its own: identity, loading, its analysis, token
geometry, layer rows, head statistics, query maps and the npz's arrays.

Torch-free at import: every member imports what it needs when called.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

    import numpy as np
    from PIL import Image
    from torch import Tensor, nn

    from vitviz.kindapi.intermediates import HeadReplacement, Intermediates
    from vitviz.kindapi.protocol import (
        FaithfulnessReport,
        ImageInput,
        ImageNumbers,
        KindAnalysis,
        KindMethod,
        Loaded,
        ModelShape,
        Session,
        ViewWords,
    )


def unavailable_methods(loaded: Loaded, head: bool) -> dict[str, str]:
    """{method name: why it can't run on ``loaded``'s model} over the whole method table
    (``head``: the model has a classification head and classes)."""
    from vitviz.explain.methods import all_methods

    reasons = {m.name: m.unavailable_on(loaded.model, head) for m in all_methods()}
    return {name: why for name, why in reasons.items() if why is not None}


class KindBase:
    """Defaults of ``ModelKind``: a kind of classifier whose classes are its head's, that
    vitviz neither trains nor opens from a user's code, analysing one image at a time."""

    name: str
    label: str
    catch_all = False  # tried last among the kinds that own a model (the ViT's generic layouts)
    families: Sequence[Any] = ()
    model_code: Any = None
    training: Any = None
    METHODS_MODULE = ""  # the module whose METHODS and CANNOT declare its methods (DESIGN §5)
    OWNER = "this model"  # "a ViT": whose classes ``apply_prompts`` refuses to replace

    # -- identity and words --------------------------------------------------------------------
    def owns(self, model: nn.Module) -> bool:
        return getattr(model, "model_kind", None) == self.name

    def architecture(self, model: nn.Module) -> str:
        return type(model).__name__

    def parts(self, model: nn.Module) -> tuple[str, ...]:
        return ()

    # -- loading -------------------------------------------------------------------------------
    def probabilities(self, model: nn.Module, logits: Tensor) -> Tensor:
        return logits.softmax(dim=-1)

    def rescore(self, analysis: KindAnalysis, loaded: Loaded) -> KindAnalysis | None:
        return None  # its classes never change under an analysis

    def apply_prompts(self, loaded: Loaded, prompts: Sequence[str]) -> str | None:
        return (
            f"{self.OWNER}'s classes are its head's; prompts need a CLIP-style model "
            "with a text tower"
        )

    # -- analysing -----------------------------------------------------------------------------
    def analyze_images(
        self, loaded: Loaded, images: Sequence[ImageInput], **options: Any
    ) -> Iterator[Any]:
        raise ValueError(f"{self.label} analyses its images one at a time")

    def finish_analysis(self, analysis: KindAnalysis) -> KindAnalysis:
        return analysis  # its own analysis is complete as made

    def intermediates(
        self, model: nn.Module, x: Tensor, *, replace: HeadReplacement | None = None
    ) -> Intermediates:
        raise ValueError(f"vitviz can't take a {self.label} apart into its blocks and heads")

    # -- methods -------------------------------------------------------------------------------
    def _methods(self) -> Any:
        return importlib.import_module(self.METHODS_MODULE) if self.METHODS_MODULE else None

    def implementation(self, method: str) -> KindMethod | None:
        module = self._methods()
        return None if module is None else module.METHODS.get(method)

    def missing_method(self, method: str) -> str | None:
        module = self._methods()
        return None if module is None else module.CANNOT.get(method)

    # -- presenting ----------------------------------------------------------------------------
    def map_picture(
        self,
        analysis: Any,
        map_: np.ndarray,
        colormap: str,
        max_side: int | None,
        title: list[str] | None,
    ) -> Image.Image:
        """Over the model input, untitled (each map at its own grid)."""
        return self.over_input(analysis, map_, colormap, 0.6)

    def over_input(
        self, analysis: Any, values: np.ndarray, colormap: str, opacity: float
    ) -> Image.Image:
        """``values`` (a map of any of its grids) over the model input, taken to the first grid
        (each cell the value of the token covering its centre)."""
        import numpy as np
        import torch

        from vitviz.imaging.overlay import overlay_on_image

        fine = self.token_geometry(analysis).on_grid(torch.as_tensor(np.asarray(values)))
        return overlay_on_image(analysis.pixels, fine.numpy(), colormap=colormap, opacity=opacity)

    def heads_picture(self, analysis: Any, colormap: str, titled: bool) -> Image.Image | None:
        return None  # the window's head grid shows its layers; explain writes no picture

    def unused_options(self) -> Mapping[str, str]:
        return {}

    # -- engine and window ---------------------------------------------------------------------
    def has_head(self, loaded: Loaded) -> bool:
        """Its model has a classification head (maps of a class, faithfulness)."""
        return int(getattr(loaded.model.config, "num_classes", 1)) > 0

    def view_words(self, analysis: Any) -> ViewWords:
        """How the window words its layers and queries."""
        from vitviz.kindapi.protocol import ViewWords

        return ViewWords()

    def model_shape(self, loaded: Loaded) -> ModelShape:
        from vitviz.kindapi.protocol import ModelShape

        depth, heads = self.parameter_bounds(loaded.model)
        config = loaded.model.config.to_dict()
        lines = (f"architecture: {self.architecture(loaded.model)}",)
        return ModelShape(depth, heads, 0, config, f"{depth} layers × {heads} heads", lines)

    def thumbnails(self, analysis: Any) -> tuple[tuple[int, int], int]:
        """The head grid's thumbnails' grid and its cells' side in input pixels."""
        geometry = self.token_geometry(analysis)
        return tuple(geometry.grid), geometry.cell_pixels

    def check_memory(self, model: nn.Module, image_size: tuple[int, int]) -> None:
        return None  # its analysis memory is not modelled

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

    def default_class(self, session: Session) -> int:
        return int(session.analysis.top_class) if self.has_head(session.loaded) else -1

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
        usable = m.unavailable_on(loaded.model, self.has_head(loaded)) is None
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

    def heads_query_words(self, query: tuple[int, int] | None) -> str:
        """The head-grid picture's words for the query (None: no cell clicked)."""
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
            query=self.heads_query_words(query),
            colormap=colormap,
            opacity=opacity,
            per_head=per_head,
        )

    def view_map_picture(
        self, session: Session, values: np.ndarray, colormap: str, opacity: float
    ) -> Image.Image:
        return self.over_input(session.analysis, values, colormap, opacity)
