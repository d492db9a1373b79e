"""The Vision Transformer kind: one grid of patch tokens after prefix tokens (CLS, registers).

Holds vitviz's own ``VisionTransformer`` and any module from a user's code whose attention
``vitviz.modelcode`` captures. ``KIND`` is what ``vitviz.kinds`` registers.
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
    LayerRow,
    Loaded,
    MethodImplementation,
    ModelShape,
    QueryMaps,
    Session,
    TokenGeometry,
)
from vitviz.kinds.vit import engine_data


class ViTKind:
    """A ViT: every layer attends over [prefix tokens..., patches row-major over the grid]."""

    name = "vit"
    label = "Vision Transformer"

    def owns(self, model: nn.Module) -> bool:
        from vitviz.model.protocol import ExplainableModel

        return isinstance(model, ExplainableModel)

    @property
    def families(self) -> Sequence[Any]:
        return ()  # the generic layouts of vitviz.checkpoints.families

    def analyze(self, loaded: Any, image: Any, **options: Any) -> Any:
        from vitviz.analysis import analyze

        return analyze(loaded, image, **options)

    def token_geometry(self, analysis: Any) -> TokenGeometry:
        return engine_data.token_geometry(analysis)

    def implementation(self, method: str) -> MethodImplementation | None:
        return None  # the method table's own compute functions are the ViT's (for now)

    def layer_rows(self, analysis: Any) -> tuple[LayerRow, ...]:
        return engine_data.layer_rows(analysis)

    # -- engine and window (helper "engine"): vitviz.kinds.vit.engine_data -------------------
    def model_shape(self, loaded: Loaded) -> ModelShape:
        return engine_data.model_shape(loaded)

    def check_memory(self, model: nn.Module, image_size: tuple[int, int]) -> None:
        engine_data.check_memory(model, image_size)

    def image_numbers(self, session: Session) -> ImageNumbers:
        return engine_data.image_numbers(session)

    def default_class(self, session: Session) -> int:
        return int(session.analysis.top_class)

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
        return engine_data.heads_picture(session, query, colormap, opacity, per_head)

    def map_picture(
        self, session: Session, values: np.ndarray, colormap: str, opacity: float
    ) -> Image.Image:
        return engine_data.map_picture(session, values, colormap, opacity)


KIND = ViTKind()
