"""The engine members (``EngineMembers``) of a kind whose stages each have their own token grid
(Swin, the pyramid ViTs): its ``engine_data`` module holds them under these names, and each is
imported when first called, so a kind package stays torch-free when the registry reads it."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

    import numpy as np
    from PIL import Image

    from vitviz.kindapi.protocol import (
        FaithfulnessReport,
        ImageNumbers,
        LayerRow,
        QueryMaps,
        Session,
    )


class StagedEngineMembers:
    """Mixin: ``ENGINE_DATA`` names the kind's module; ``layer_rows`` labels the head picture."""

    ENGINE_DATA: str
    layer_rows: Callable[[Any], tuple[LayerRow, ...]]  # the kind's own (ModelKind.layer_rows)

    def _engine(self) -> ModuleType:
        return importlib.import_module(self.ENGINE_DATA)

    def image_numbers(self, session: Session) -> ImageNumbers:
        return self._engine().image_numbers(session, self)

    def default_class(self, session: Session) -> int:
        return self._engine().default_class(session)

    def query_maps(self, session: Session, query: tuple[int, int] | None) -> QueryMaps:
        return self._engine().query_maps(session, query)

    def method_map(
        self,
        session: Session,
        method: str,
        query: tuple[int, int] | None,
        target_class: int | None,
        params: Mapping[str, Any],
    ) -> np.ndarray:
        return self._engine().method_map(session, method, query, target_class, params)

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
        return self._engine().evaluate_faithfulness(
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
        return self._engine().export_npz(session, path, method, params, target_class)

    def view_heads_picture(
        self,
        session: Session,
        query: tuple[int, int] | None,
        colormap: str,
        opacity: float,
        per_head: bool,
    ) -> Image.Image:
        labels = [r.label for r in self.layer_rows(session.analysis)]
        return self._engine().heads_picture(session, query, colormap, opacity, per_head, labels)
