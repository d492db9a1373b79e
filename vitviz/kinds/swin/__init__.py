"""The Swin Transformer kind: shifted-window attention over a pyramid of token grids.

``KIND`` is what ``vitviz.kinds`` registers; the network, its checkpoint families, its analysis
and its versions of the table's methods are the modules beside this one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image
from torch import nn

from vitviz.kinds.protocol import (
    FaithfulnessReport,
    ImageNumbers,
    LayerGrid,
    LayerRow,
    Loaded,
    MethodImplementation,
    ModelShape,
    QueryMaps,
    Session,
    TokenGeometry,
)
from vitviz.kinds.swin import engine_data
from vitviz.kinds.swin.analysis import SwinAnalysis, analyze_swin


class SwinKind:
    """vitviz's SwinTransformer and any captured model whose ``model_kind`` is "swin"."""

    name = "swin"
    label = "Swin Transformer"

    def owns(self, model: nn.Module) -> bool:
        return getattr(model, "model_kind", None) == self.name

    @property
    def families(self) -> Sequence[Any]:
        from vitviz.kinds.swin.families import huggingface, timm, torchvision

        return (torchvision.FAMILY, timm.FAMILY, huggingface.FAMILY)

    def analyze(self, loaded: Any, image: Any, **options: Any) -> SwinAnalysis:
        """``gradients`` only where the model has a head (its classes' gradients)."""
        if options.get("gradients"):
            options["gradients"] = engine_data.has_head(getattr(loaded, "model", loaded))
        return analyze_swin(loaded, image, **options)

    def token_geometry(self, analysis: SwinAnalysis) -> TokenGeometry:
        from vitviz.kinds.swin.attention import window_ids

        h0, w0 = analysis.stage_grids[0]
        patch = analysis.patch_size
        layers = tuple(
            LayerGrid(
                grid=tuple(layout.grid),
                token_pixels=patch * 2**stage,
                windows=window_ids(layout).numpy().astype("int32"),
            )
            for layout, stage in zip(analysis.layouts, analysis.block_stages, strict=True)
        )
        size = tuple(int(v) for v in analysis.input.shape[-2:])
        return TokenGeometry(input_size=size, grid=(h0, w0), cell_pixels=patch, layers=layers)

    def implementation(self, method: str) -> MethodImplementation | None:
        from vitviz.kinds.swin.methods import implementation

        return implementation(method)

    def layer_rows(self, analysis: SwinAnalysis) -> tuple[LayerRow, ...]:
        rows, counts = [], {}
        for attn, layout, stage in zip(
            analysis.attentions, analysis.layouts, analysis.block_stages, strict=True
        ):
            index = counts.get(stage, 0)
            counts[stage] = index + 1
            kind = "SW" if layout.shifted else "W"
            name = f"{stage + 1}.{index + 1}"
            label = f"{name} {kind}"
            where = f"block {name} {kind}-MSA (window {layout.window[0]}"
            where += f", shift {layout.shift[0]})" if layout.shifted else ")"
            rows.append(
                LayerRow(
                    label,
                    int(attn.shape[1]),
                    name=name,
                    title=where,
                    hover=f"block {label}",
                    selector=f" · {label}",
                )
            )
        return tuple(rows)

    # -- engine and window (helper "engine"): vitviz.kinds.swin.engine_data ------------------
    def model_shape(self, loaded: Loaded) -> ModelShape:
        return engine_data.model_shape(loaded)

    def check_memory(self, model: nn.Module, image_size: tuple[int, int]) -> None:
        return None  # a Swin's analysis memory is not modelled yet

    def image_numbers(self, session: Session) -> ImageNumbers:
        return engine_data.image_numbers(session, self)

    def default_class(self, session: Session) -> int:
        return engine_data.default_class(session)

    def query_maps(self, session: Session, query: tuple[int, int] | None) -> QueryMaps:
        return engine_data.query_maps(session, query)

    def method_map(
        self,
        session: Session,
        method: str,
        query: tuple[int, int] | None,
        target_class: int | None,
        params: Mapping[str, Any],
    ) -> np.ndarray:
        return engine_data.method_map(session, method, query, target_class, params)

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
        return engine_data.evaluate_faithfulness(
            session, names, steps=steps, mask=mask, name=name, params=params
        )

    def export_npz(
        self,
        session: Session,
        path: Path,
        method: str,
        params: Mapping[str, Any],
        target_class: int | None,
    ) -> Path:
        return engine_data.export_npz(session, path, method, params, target_class)

    def heads_picture(
        self,
        session: Session,
        query: tuple[int, int] | None,
        colormap: str,
        opacity: float,
        per_head: bool,
    ) -> Image.Image:
        labels = [r.label for r in self.layer_rows(session.analysis)]
        return engine_data.heads_picture(session, query, colormap, opacity, per_head, labels)

    def map_picture(
        self, session: Session, values: np.ndarray, colormap: str, opacity: float
    ) -> Image.Image:
        return engine_data.map_picture(session, values, colormap, opacity)


KIND = SwinKind()
