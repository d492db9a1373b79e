"""The engine's feature jobs (DESIGN §2.4, §5): the Features view's maps and the logit lens of
the current analysis, as numpy for the window, from ``vitviz.explain.feature_methods`` (one
intermediates pass per analysis, kept: a new query or layer costs no forward pass). What a
query does not change (the PCA, the norms of a block, the logit lens) is kept per analysis too
and handed back as the same arrays, so a click computes and redraws the similarity only."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from vitviz.workers.job_basics import UserFacingError
from vitviz.workers.jobs import EngineState
from vitviz.workers.messages import FeaturesResult

# id(state) -> (a weak reference to its analysis, key -> part): a replaced analysis is not kept
_PARTS: dict[int, tuple[Callable[[], Any], dict[tuple, Any]]] = {}


def _kept(state: EngineState, key: tuple, compute: Callable[[], Any]) -> Any:
    """``compute()`` once per ``key`` and analysis of ``state`` (a new analysis forgets all)."""
    held = _PARTS.get(id(state))
    if held is None or held[0]() is not state.analysis:
        try:
            ref: Callable[[], Any] = weakref.ref(state.analysis)
        except TypeError:  # an analysis without weak references: its parts are not kept
            return compute()
        held = _PARTS[id(state)] = (ref, {})
    parts = held[1]
    if key not in parts:
        parts[key] = compute()
    return parts[key]


def features(
    state: EngineState,
    layer: int = -1,
    query: tuple[int, int] | None = None,
    foreground: float = 0.0,
) -> FeaturesResult:
    """PCA, similarity to ``query`` (None: the CLS or the mean token) and token norms of
    block ``layer`` (−1: the last), the logit lens; UserFacingError (kind "features") for a
    model vitviz can't take apart. A kind that refuses PCA gets ``pca`` None and the reason in
    ``pca_note``, its other views still shown."""
    import torch

    from vitviz.explain.feature_methods import (
        analysis_logit_lens,
        feature_pass,
        high_norm_tokens,
        similarity_method,
        similarity_rows,
    )
    from vitviz.explain.methods import get_method

    a = state.analysis
    if a is None or state.loaded is None:
        raise UserFacingError("Open an image and a checkpoint first.", "no_image")
    try:
        inter = feature_pass(a)
        count = len(inter.blocks)
        index = max(0, min(count - 1, count + layer if layer < 0 else layer))
        shown = _kept(state, ("norms", index), lambda: high_norm_tokens(a, index))
        sim = similarity_method(a, query, None, {"layer": index}).numpy()
        rows = _kept(state, ("table", index), lambda: similarity_rows(a, index))
    except ValueError as exc:
        raise UserFacingError(str(exc), "features") from exc

    def pca_of() -> tuple[np.ndarray | None, str]:
        """The PCA colours, or None and why (a kind that refuses PCA keeps the other views)."""
        method = get_method("pca")
        reason = method.unavailable(a)
        if reason is not None:
            return None, reason
        try:
            return method(a, None, None, {"foreground": foreground}).numpy(), ""
        except ValueError as exc:
            return None, str(exc)

    pca, pca_note = _kept(state, ("pca", foreground), pca_of)

    def lens_of() -> tuple[np.ndarray | None, str]:
        if not (state.kind.has_head(state.loaded) and a.logits.numel() > 0):
            return None, ""
        try:
            with torch.no_grad():
                return analysis_logit_lens(a).cpu().numpy().astype(np.float32), ""
        except ValueError as exc:
            return None, str(exc)

    lens, note = _kept(state, ("lens",), lens_of)
    return FeaturesResult(
        layer=index,
        blocks=count,
        query=query,
        pca=pca,
        pca_note=pca_note,
        similarity=sim,
        norms=shown["norms"],
        high=shown["high"],
        prefix_norms=shown["prefix"],
        logit_lens=lens,
        class_names=list(state.loaded.class_names) if lens is not None else [],
        note=note,
        asked_layer=layer,
        table=None if rows is None else rows[0],
        cells=None if rows is None else rows[1],
    )
