"""The engine's compare jobs (DESIGN §2.4, §5): a second model beside the current one, both run
on the current image, each one's map of the same method and query, and the head similarity.
The second model and its analysis are kept per engine state until another is opened."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vitviz.workers.job_basics import UserFacingError
from vitviz.workers.jobs import EngineState
from vitviz.workers.messages import CompareResult

_SECOND: dict[int, Any] = {}  # id(engine state) -> the second LoadedModel
_ANALYSED: dict[int, tuple[Any, Any]] = {}  # id(state) -> (the first's analysis, the second's)
_NUMBERS: dict[int, tuple[Any, Any]] = {}  # id(state) -> (B's analysis, its ImageNumbers)
TOP = 5


def open_second(state: EngineState, path: str | Path) -> str:
    """Open ``path`` as model B (on the current device); its name in words."""
    from vitviz.checkpoints import CheckpointError, load_checkpoint
    from vitviz.core.devices import resolve_device

    try:
        loaded = load_checkpoint(path)
    except CheckpointError as exc:
        raise UserFacingError(str(exc), "checkpoint") from exc
    loaded.model.to(resolve_device(state.device)).eval()
    _SECOND[id(state)] = loaded
    _ANALYSED.pop(id(state), None)
    _NUMBERS.pop(id(state), None)
    return str(loaded.name)


def _second_analysis(state: EngineState) -> Any:
    """Model B's analysis of the image model A's analysis is of (made once per analysis)."""
    kept = _ANALYSED.get(id(state))
    if kept is not None and kept[0] is state.analysis:
        return kept[1]
    second = _SECOND[id(state)]
    analysis = second.kind.analyze(second, state.source)
    _ANALYSED[id(state)] = (state.analysis, analysis)
    return analysis


def _numbers(state: EngineState, loaded: Any, analysis: Any) -> Any:
    """Model B's (``loaded``) image numbers of ``analysis`` as its kind gives them to the
    viewer (kept with the analysis): the methods it can't run and its words."""
    from vitviz.pipeline.compare import ModelSession

    key = id(state)
    kept = _NUMBERS.get(key)
    if kept is not None and kept[0] is analysis:
        return kept[1]
    session = ModelSession(loaded, analysis)
    numbers = session.kind.image_numbers(session)
    _NUMBERS[key] = (analysis, numbers)
    return numbers


def _top(loaded: Any, analysis: Any) -> list[tuple[str, float]]:
    probs = analysis.probs.detach().float().cpu()
    if probs.numel() == 0:
        return []
    order = probs.argsort(descending=True)[:TOP].tolist()
    return [(str(loaded.class_names[c]), float(probs[c])) for c in order]


def compare_view(
    state: EngineState,
    method: str,
    query: tuple[int, int] | None = None,
    params: dict[str, Any] | None = None,
) -> CompareResult:
    """Both models' maps of ``method`` for ``query`` on the current image, both predictions and
    the head similarity of their query attention."""
    from vitviz.explain.features import head_similarity
    from vitviz.pipeline.compare import ModelSession, query_attention
    from vitviz.workers.held import knocked_out

    if state.analysis is None or state.loaded is None:
        raise UserFacingError("Open an image and a checkpoint first.", "no_image")
    if id(state) not in _SECOND:
        raise UserFacingError("Choose the model to compare with first.", "compare")
    second = _SECOND[id(state)]
    a = state.analysis
    try:
        b = _second_analysis(state)
    except (ValueError, OSError) as exc:
        raise UserFacingError(str(exc), "compare") from exc
    sim = head_similarity(query_attention(state.loaded, a), query_attention(second, b)).numpy()
    knocked = knocked_out(state)  # A is the viewer's model, with the heads it holds out
    numbers_b = _numbers(state, second, b)
    # the query is a cell of A's grid: B's is its cell at the same place of the image
    geometry_a = ModelSession(state.loaded, a).kind.token_geometry(a)
    query_b = None if query is None else numbers_b.token_geometry.cell_from(query, geometry_a)
    maps, errors = [], []
    for loaded, analysis, cell in ((state.loaded, a, query), (second, b, query_b)):
        session = ModelSession(loaded, analysis)
        try:
            maps.append(loaded.kind.method_map(session, method, cell, None, params or {}))
            errors.append("")
        except ValueError as exc:
            maps.append(None)
            errors.append(str(exc))
    return CompareResult(
        method=method,
        query=query,
        query_b=query_b,
        name_a=str(state.loaded.name),
        name_b=str(second.name),
        map_a=maps[0],
        map_b=maps[1],
        top_a=_top(state.loaded, a),
        top_b=_top(second, b),
        head_similarity=sim,
        error=next((e for e in errors if e), ""),
        refused_b=dict(numbers_b.unavailable),
        errors=(errors[0], errors[1]),
        image_label=state.label,
        knocked_a=knocked,
        ablation_a=state.intervention.ablation if knocked else "zero",
        words_b=numbers_b.words,
        geometry_b=numbers_b.token_geometry,
    )
