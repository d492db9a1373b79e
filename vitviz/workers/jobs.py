"""The engine's jobs as plain functions over an EngineState: no Qt, no threads, unit-testable.

The engine thread calls these; each either returns a message for the window or raises. A
UserFacingError carries a short message for an expected mistake; anything else is a bug and
goes to the error dialog with its traceback.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vitviz.workers import swin_jobs
from vitviz.workers.job_basics import UserFacingError, display_copy
from vitviz.workers.messages import (
    CurvesResult,
    FaithfulnessResult,
    ImageResult,
    MapParams,
    MapsResult,
    MethodInfo,
    ModelSummary,
    ParamInfo,
)

__all__ = ["UserFacingError", "display_copy"]  # the engine and tests know them as jobs.*
LOCAL_ATTENTION_BYTES = 96 * 2**20  # attention up to this size goes to the window (fast path)


@dataclass
class EngineState:
    """What the engine thread holds between requests."""

    loaded: Any = None  # LoadedModel
    analysis: Any = None  # Analysis
    source: Any = None  # what the current image was loaded from
    label: str = ""
    device: str = "cpu"


def warm_up() -> list[str]:
    """Import torch and the core (2-3 s) and list the devices present."""
    from vitviz import analysis  # noqa: F401
    from vitviz.devices import available_devices

    return available_devices()


def method_table() -> list[MethodInfo]:
    """The method table as plain data for the window (read again after a method is added)."""
    from vitviz.explain.methods import all_methods

    return [
        MethodInfo(
            name=m.name,
            label=m.label,
            parameters=tuple(
                ParamInfo(
                    name=p.name,
                    type=p.type.__name__,
                    default=p.default,
                    label=p.label,
                    range=p.range,
                    choices=p.choices,
                    per=p.per,
                    step=p.step,
                    help=p.help,
                )
                for p in m.parameters
            ),
            needs_gradients=m.needs_gradients,
            queries=m.queries,
            scaling=m.scaling,
            description=m.description,
        )
        for m in all_methods()
    ]


def summarize(loaded: Any, device: str) -> ModelSummary:
    if swin_jobs.is_swin(loaded):
        return swin_jobs.summarize_swin(loaded, device)
    cfg = loaded.model.config
    return ModelSummary(
        name=loaded.name,
        family=loaded.family,
        path=loaded.path,
        num_classes=cfg.num_classes,
        depth=cfg.depth,
        heads=cfg.heads,
        patch_size=cfg.patch_size,
        image_size=tuple(cfg.image_size),
        num_prefix_tokens=cfg.num_prefix_tokens,
        device=device,
        preprocessing=loaded.preprocessing.to_dict(),
        notes=tuple(loaded.notes),
        provenance=dict(loaded.provenance),
        config=cfg.to_dict(),
    )


def set_preprocessing(state: EngineState, preprocessing: dict[str, Any]) -> ModelSummary:
    """Override the current model's preprocessing (the window then analyses the image again)."""
    from vitviz.imaging import Preprocessing
    from vitviz.imaging.preprocess import check_channels

    if state.loaded is None:
        raise UserFacingError("Open a checkpoint first: no model is loaded.", "checkpoint")
    try:
        channels = state.loaded.model.config.in_channels  # the form may leave channels out
        prep = Preprocessing.from_dict({"channels": channels, **preprocessing})
        check_channels(prep, channels)
        _check_fits(state.loaded.model, prep)  # too large for memory: refused, not run
    except (TypeError, ValueError) as exc:
        raise UserFacingError(f"Preprocessing not changed: {exc}", "settings_invalid") from exc
    state.loaded.preprocessing = prep
    state.analysis = None
    return summarize(state.loaded, state.device)


def _check_fits(model: Any, prep: Any) -> None:
    """ValueError when ``prep`` can't make inputs for ``model`` (patch size) or their analysis
    would not fit in memory ("fit" sizes depend on the image: checked when it is analysed)."""
    from vitviz.checkpoints.load import preprocessing_problem
    from vitviz.memory import check_analysis_memory

    problem = preprocessing_problem(prep, model.config.patch_size)
    if problem is not None:
        raise ValueError(problem)
    if prep.resize != "fit" and not swin_jobs.is_swin(model):  # a Swin's isn't modelled yet
        check_analysis_memory(model, prep.image_size)


def load_model(
    state: EngineState, path: str | Path, config: dict[str, Any] | None = None
) -> ModelSummary:
    """Open a checkpoint; the current model stays if this one can't be opened."""
    from vitviz.checkpoints import CheckpointError, MissingSettingsError, load_checkpoint

    try:
        loaded = load_checkpoint(path, config=config)
    except MissingSettingsError as exc:
        raise UserFacingError(str(exc), "settings", path=Path(path), fields=exc.fields) from exc
    except CheckpointError as exc:
        raise UserFacingError(str(exc), "checkpoint") from exc
    return use_model(state, loaded)


def use_model(state: EngineState, loaded: Any) -> ModelSummary:
    """Make ``loaded`` (a ViT or a Swin) the current model (on the current device)."""
    from vitviz.devices import resolve_device

    loaded.model.to(resolve_device(state.device)).eval()
    state.loaded = loaded
    state.analysis = None
    return summarize(loaded, state.device)


def set_device(state: EngineState, device: str) -> str:
    from vitviz.devices import resolve_device

    try:
        dev = resolve_device(device)
    except ValueError as exc:
        raise UserFacingError(str(exc), "device") from exc
    if state.loaded is not None:
        state.loaded.model.to(dev)
    state.device = str(dev)
    return state.device


def analyze_image(
    state: EngineState, source: Any, label: str, gradients: bool = False
) -> ImageResult:
    """Analyse ``source`` (path, bytes or uint8 array) with the current model; ``gradients``
    keeps the top class's attention gradients from the same pass (gradient methods shown)."""
    from vitviz.analysis import analyze
    from vitviz.imaging import ImageLoadError

    if state.loaded is None:
        raise UserFacingError("Open a checkpoint first: no model is loaded.", "checkpoint")
    if swin_jobs.is_swin(state.loaded):
        return swin_jobs.analyze_swin_image(state, source, label, gradients)
    start = time.perf_counter()
    try:  # decoded once, reduced to what the overlays and the display need (at most 4096 px)
        analysis = analyze(state.loaded, source, gradients=gradients)
    except ImageLoadError as exc:
        raise UserFacingError(str(exc), "image") from exc
    except ValueError as exc:  # e.g. an image smaller than one patch after preprocessing
        raise UserFacingError(f"{label}: {exc}", "image") from exc
    state.analysis, state.source, state.label = analysis, source, label
    display, scale = display_copy(analysis.source)  # as the model sees it (gray for 1 channel)
    left, top, right, bottom = analysis.geometry.region
    return ImageResult(
        label=label,
        source_path=Path(source) if isinstance(source, (str, Path)) else None,
        display=display,
        display_scale=scale,
        region=(left * scale, top * scale, right * scale, bottom * scale),
        input_pixels=analysis.pixels,
        grid=analysis.grid,
        patch_size=analysis.patch_size,
        num_prefix_tokens=analysis.num_prefix_tokens,
        num_layers=analysis.num_layers,
        num_heads=analysis.num_heads,
        class_names=list(analysis.class_names),
        probs=analysis.probs.numpy(),
        logits=analysis.logits.numpy(),
        top_class=analysis.top_class,
        mean_distance=analysis.mean_distance.numpy(),
        entropy=analysis.entropy.numpy(),
        prefix_share=analysis.prefix_share.numpy(),
        token_norms=analysis.token_norms.numpy(),
        attention=_shareable_attention(analysis),
        scores=getattr(state.loaded.model.config, "outputs", "logits"),
        unavailable=_unavailable(analysis),
        mask_path=_mask_path(source),
        device=analysis.device,
        seconds=time.perf_counter() - start,
    )


def _unavailable(analysis: Any) -> dict[str, str]:
    """{method name: why it can't run on this model} for the window's method list."""
    from vitviz.explain.methods import all_methods

    reasons = {m.name: m.unavailable(analysis) for m in all_methods()}
    return {name: why for name, why in reasons.items() if why is not None}


def _mask_path(source: Any) -> Path | None:
    from vitviz.explain.localisation import mask_path_for

    return mask_path_for(source) if isinstance(source, (str, Path)) else None


def _shareable_attention(analysis: Any) -> np.ndarray | None:
    """The attention as a read-only float32 array for the window's fast path (query changes
    without a round trip to the engine), or None when it is too large to hand over."""
    att = analysis.attention
    if str(att.dtype) != "torch.float32" or att.device.type != "cpu":
        return None  # half precision or on a GPU: the engine computes the maps there
    if att.numel() * 4 > LOCAL_ATTENTION_BYTES:
        return None
    array = att.numpy()
    array.flags.writeable = False
    return array


def raw_maps(
    attention: np.ndarray, query: tuple[int, int] | None, grid: tuple[int, int], num_prefix: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The query's attention, numpy only (cheap enough for the GUI thread).

    attention (L, H, N, N) -> head maps (L, H, gh, gw), mean over heads (L, gh, gw) and the
    attention given to each prefix token (L, H, num_prefix). ``query`` None: CLS, or the mean
    of all patch queries for a model without prefix tokens.
    """
    L, H = attention.shape[:2]
    gh, gw = grid
    if query is None:
        rows = attention[:, :, 0, :] if num_prefix else attention[:, :, num_prefix:, :].mean(2)
    else:
        r, c = query
        if not (0 <= r < gh and 0 <= c < gw):
            raise UserFacingError(f"patch ({r}, {c}) is outside the {gh}×{gw} grid", "image")
        rows = attention[:, :, num_prefix + r * gw + c, :]  # (L, H, N)
    head = np.ascontiguousarray(rows[..., num_prefix:], dtype=np.float32).reshape(L, H, gh, gw)
    return head, head.mean(axis=1), np.array(rows[..., :num_prefix], dtype=np.float32)


def maps_levels(head_maps: np.ndarray, mean_maps: np.ndarray) -> tuple[float, float]:
    """One colour scale for every thumbnail of the head grid (0 to a round number for
    attention, so it stays put while the query moves)."""
    from vitviz.imaging.colormaps import nice_levels

    lo = min(float(head_maps.min()), float(mean_maps.min()))
    hi = max(float(head_maps.max()), float(mean_maps.max()))
    return nice_levels(np.array([lo, hi]))


def compute_maps(state: EngineState, params: MapParams) -> MapsResult:
    """Raw maps of the query for every layer and head, plus the chosen method's map."""
    from vitviz.explain.methods import get_method

    a = state.analysis
    if a is None:
        # after a model change, until the image is analysed again with it (the window waits)
        raise UserFacingError("No image has been analysed yet.", "no_image")
    if swin_jobs.is_swin(state.loaded):
        return swin_jobs.swin_maps(state, params)
    patch = params.query
    try:  # computed where the attention is; only the maps cross to the host
        head_maps, mean_maps, prefix = a.host_query_maps(patch)
    except ValueError as exc:
        raise UserFacingError(str(exc), "image") from exc
    target = a.top_class if params.target_class is None else params.target_class
    method_map, error = None, None
    if params.method != "attention":  # attention: the head maps above are the map
        try:
            method_map = get_method(params.method)(
                a, patch, params.target_class, params.params(), strict=False
            ).numpy()
        except ValueError as exc:
            error = str(exc)
    return MapsResult(
        params=params,
        head_maps=head_maps,
        mean_maps=mean_maps,
        method_map=method_map,
        target_class=target,
        prefix_attention=prefix,
        levels=maps_levels(head_maps, mean_maps),
        error=error,
    )


def faithfulness(
    state: EngineState, method: str, params: dict[str, Any] | None = None, steps: int = 20
) -> FaithfulnessResult:
    """Deletion and insertion curves of ``method`` and of ``random`` on the current image (the
    CLS query, or a Swin's average pool; its top class), with the localisation numbers when a
    mask lies beside it. A Swin's maps are ``swin_method_map``'s (``evaluate_swin_methods``)."""
    from vitviz.explain.faithfulness import evaluate_methods
    from vitviz.explain.localisation import mask_grid_for
    from vitviz.kinds.swin.faithfulness import evaluate_swin_methods

    a = state.analysis
    if a is None:
        raise UserFacingError("Open an image and a checkpoint first.", "no_image")
    names = list(dict.fromkeys([method, "random"]))
    mask_file = _mask_path(state.source)
    geometry = getattr(a, "geometry", None)  # a Swin's: None when its input came as a tensor
    given = {method: params or {}}
    try:
        mask = None
        if mask_file is not None and geometry is not None:
            mask = mask_grid_for(state.source, geometry)
        if swin_jobs.is_swin(state.loaded):
            model = state.loaded.model
            result = evaluate_swin_methods(
                a, model, names, steps=steps, mask=mask, name=state.label, params=given
            )
        else:
            result = evaluate_methods(
                a, names, steps=steps, mask=mask, name=state.label, params=given
            )
    except ValueError as exc:
        raise UserFacingError(f"Faithfulness not measured: {exc}", "faithfulness") from exc
    curves = {}
    for name, c in result.methods.items():
        loc = c.localisation
        mass = None if loc is None or loc.mass_in_mask != loc.mass_in_mask else loc.mass_in_mask
        curves[name] = CurvesResult(
            deletion=tuple(c.deletion),
            insertion=tuple(c.insertion),
            deletion_auc=c.deletion_auc,
            insertion_auc=c.insertion_auc,
            mass_in_mask=mass,
            pointing_hit=None if loc is None else loc.pointing_hit,
        )
    return FaithfulnessResult(
        label=state.label,
        method=method,
        target_class=result.target_class,
        steps=steps,
        curves=curves,
        has_mask=mask is not None,
    )


def export(
    state: EngineState,
    path: str | Path,
    what: str,
    params: MapParams,
    current_map: np.ndarray | None,
    colormap: str,
    opacity: float,
    per_head: bool = False,
) -> Path:
    """Write the current view ('view' PNG), the head grid ('heads' PNG: titled, on the grid's
    scale, shared or ``per_head``) or the numbers (.npz)."""
    from vitviz import export as ex
    from vitviz.imaging.overlay import save_png

    a = state.analysis
    if a is None:
        raise UserFacingError("Nothing to export yet: open an image and a checkpoint.", "export")
    target = Path(path)
    try:
        if swin_jobs.is_swin(state.loaded):  # the npz and map PNGs of `vitviz-cli explain`
            return swin_jobs.export_swin(
                state, target, what, params, current_map, colormap, opacity, per_head
            )
        if what == "npz":
            return ex.write_npz(a, ex.compute_maps(a, _export_settings(a, params)), target)
        if what == "heads":
            picture = ex.heads_grid(a, colormap, opacity, params.query, per_head)
            return save_png(picture, target)
        if current_map is None:
            raise UserFacingError("There is no map on screen to export.", "export")
        return save_png(ex.map_overlay(a, current_map, colormap, opacity), target)
    except ValueError as exc:  # e.g. a method that can't run on this model
        raise UserFacingError(f"Nothing exported: {exc}", "export") from exc
    except OSError as exc:
        raise UserFacingError(f"Could not write {target}: {exc.strerror or exc}", "export") from exc


def _export_settings(analysis: Any, params: MapParams) -> Any:
    """The npz's maps: today's three with the shown method's shared settings (fusion, discard
    ratio, start layer), plus the shown method's own map when it can run."""
    from vitviz import export as ex
    from vitviz.explain.methods import get_method

    values = params.params()
    shared = {k: values[k] for k in ex.SHARED_PARAMETERS if k in values}
    method = get_method(params.method)
    extra = () if params.method == "attention" or method.unavailable(analysis) else (method.name,)
    return ex.MapSettings(
        **shared, target_class=params.target_class, methods=extra, params={method.name: values}
    )


def load_model_code(state: EngineState, spec: Any) -> ModelSummary:
    """Open a model written in a Python file (a ModelCodeSpec); the current model stays if the
    file can't be imported, built, weighted or shows no attention."""
    from vitviz.modelcode import ModelCodeError
    from vitviz.modelcode import load_model_code as load_code

    try:
        loaded = load_code(spec)
    except ModelCodeError as exc:
        raise UserFacingError(str(exc), "checkpoint") from exc
    return use_model(state, loaded)


def list_cache(state: EngineState) -> list:
    """Checkpoints already in the Hugging Face and torch hub caches (nothing is downloaded)."""
    from vitviz.checkpoints.cache import list_cached_checkpoints

    return list_cached_checkpoints()
