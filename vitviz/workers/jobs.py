"""The engine's jobs as plain functions over an EngineState: no Qt, no threads, unit-testable.

The engine thread calls these; each either returns a message for the window or raises. A
UserFacingError carries a short message for an expected mistake; anything else is a bug and
goes to the error dialog with its traceback. What differs between model kinds (a ViT, a Swin)
is asked of the current model's kind, which the state carries (``EngineState.kind``, the one
resolved when the model was opened; DESIGN §3): these jobs never test it nor work it out again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from vitviz.imaging.colormaps import maps_levels
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

if TYPE_CHECKING:
    from vitviz.checkpoints.loaded import LoadedModel
    from vitviz.imaging import Preprocessing
    from vitviz.imaging.loading import ImageSource
    from vitviz.kindapi import KindAnalysis, ModelKind
    from vitviz.modelcode import ModelCodeSpec

__all__ = ["UserFacingError", "display_copy", "maps_levels"]  # known as jobs.* elsewhere


@dataclass
class EngineState:
    """What the engine thread holds between requests."""

    loaded: LoadedModel | None = None  # a model of any kind
    analysis: KindAnalysis | None = None  # its kind's analysis of the current image
    source: ImageSource | None = None  # what the current image was loaded from
    label: str = ""
    device: str = "cpu"
    rescored: bool = False  # analysis is the current classes' (new prompts scored, no forward)
    intervention: Any = None  # heads knocked out of the model (workers.interventions), or None

    @property
    def kind(self) -> ModelKind:
        """The current model's kind, carried by it (``LoadedModel.kind``); a model is loaded."""
        assert self.loaded is not None
        return self.loaded.kind


def warm_up() -> list[str]:
    """Import torch and the core (2-3 s) and list the devices present."""
    from vitviz.core.devices import available_devices
    from vitviz.pipeline import analysis  # noqa: F401

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
            nearest=m.nearest,
            needs_head=m.needs_head,
        )
        for m in all_methods()
    ]


def summarize(loaded: LoadedModel, device: str) -> ModelSummary:
    cfg = loaded.model.config
    kind = loaded.kind
    shape = kind.model_shape(loaded)
    return ModelSummary(
        name=loaded.known_name,
        family=loaded.family,
        path=loaded.path,
        num_classes=cfg.num_classes,
        depth=shape.depth,
        heads=shape.heads,
        patch_size=cfg.patch_size,
        image_size=tuple(cfg.image_size),
        num_prefix_tokens=shape.num_prefix_tokens,
        device=device,
        preprocessing=loaded.preprocessing.to_dict(),
        notes=tuple(loaded.notes),
        provenance=dict(loaded.provenance),
        config=dict(shape.config),
        headline=shape.headline,
        architecture=shape.architecture,
        takes_prompts=shape.takes_prompts,
        prompts=tuple(shape.prompts),
        assumed=dict(loaded.assumed),
        arch=loaded.architecture_name,
    )


def apply_prompts(state: EngineState, prompts: tuple[str, ...]) -> ModelSummary:
    """Make typed ``prompts`` (one per entry; blank ones dropped) the current model's classes,
    as its kind does it (``ModelKind.apply_prompts``); a kind that takes none, or a model that
    can't read them, says why in one line. The current image is analysed again by the window
    (the summary's arrival), so its predictions rank the prompts."""
    if state.loaded is None:
        raise UserFacingError("Open a checkpoint first: no model is loaded.", "checkpoint")
    prompts = tuple(dict.fromkeys(p.strip() for p in prompts if p.strip()))
    if not prompts:
        raise UserFacingError("Prompts not applied: type at least one, one per line.", "prompts")
    kind = state.kind
    why = kind.apply_prompts(state.loaded, prompts)
    if why is not None:
        raise UserFacingError(f"Prompts not applied: {why.rstrip('.')}.", "prompts")
    previous, state.analysis = state.analysis, None  # its classes were the old prompts
    if previous is not None:  # the kept image embedding scored anew, or the image analysed again
        state.analysis = kind.rescore(previous, state.loaded)
    state.rescored = state.analysis is not None
    return summarize(state.loaded, state.device)


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
        _check_fits(state.loaded, prep)  # too large for memory: refused, not run
    except (TypeError, ValueError) as exc:
        raise UserFacingError(f"Preprocessing not changed: {exc}", "settings_invalid") from exc
    from vitviz.workers.held import release

    release(state)  # the window restores every head with a model's summary
    state.loaded.preprocessing = prep
    state.analysis = None
    return summarize(state.loaded, state.device)


def _check_fits(loaded: LoadedModel, prep: Preprocessing) -> None:
    """ValueError when ``prep`` can't make inputs for ``loaded``'s model (patch size) or their
    analysis would not fit in memory ("fit" sizes depend on the image: checked when it is
    analysed)."""
    from vitviz.checkpoints.load import preprocessing_problem

    problem = preprocessing_problem(prep, loaded.model.config.patch_size)
    if problem is not None:
        raise ValueError(problem)
    if prep.resize != "fit":
        loaded.kind.check_memory(loaded.model, prep.image_size)


def load_model(
    state: EngineState, path: str | Path, config: dict[str, Any] | None = None
) -> ModelSummary:
    """Open a checkpoint; the current model stays if this one can't be opened."""
    from vitviz.checkpoints import CheckpointError, MissingSettingsError, load_checkpoint

    try:
        loaded = load_checkpoint(path, config=config)
    except MissingSettingsError as exc:
        raise UserFacingError(
            str(exc), "settings", path=Path(path), fields=exc.fields, assumed=exc.assumed
        ) from exc
    except CheckpointError as exc:
        raise UserFacingError(str(exc), "checkpoint") from exc
    return use_model(state, loaded)


def use_model(state: EngineState, loaded: LoadedModel) -> ModelSummary:
    """Make ``loaded`` (a model of any kind) the current model (on the current device)."""
    from vitviz.core.devices import resolve_device
    from vitviz.workers.held import release

    release(state)  # another model: no head of it is knocked out
    loaded.model.to(resolve_device(state.device)).eval()
    state.loaded = loaded
    state.analysis = None
    return summarize(loaded, state.device)


def set_device(state: EngineState, device: str) -> str:
    from vitviz.core.devices import resolve_device

    try:
        dev = resolve_device(device)
    except ValueError as exc:
        raise UserFacingError(str(exc), "device") from exc
    if state.loaded is not None:
        state.loaded.model.to(dev)
    state.device = str(dev)
    return state.device


def analyze_image(
    state: EngineState, source: ImageSource, label: str, gradients: bool = False
) -> ImageResult:
    """Analyse ``source`` (path, bytes or uint8 array) with the current model; ``gradients``
    keeps the top class's attention gradients from the same pass (gradient methods shown)."""
    from vitviz.imaging import ImageLoadError
    from vitviz.pipeline.intervention_record import InterventionRecord
    from vitviz.workers.held import knocked_out, renew_means

    if state.loaded is None:
        raise UserFacingError("Open a checkpoint first: no model is loaded.", "checkpoint")
    kind = state.kind
    start = time.perf_counter()
    same = source is state.source or (
        isinstance(source, (str, Path)) and isinstance(state.source, (str, Path))
        and Path(source) == Path(state.source)
    )  # fmt: skip
    reuse = state.rescored and state.analysis is not None and same
    state.rescored = False
    try:  # decoded once, reduced to what the overlays and the display need (at most 4096 px)
        if reuse:  # new prompts on the image shown: scored without running the model again
            analysis = state.analysis
        else:
            analysis = kind.analyze(state.loaded, source, gradients=gradients)
        if not same and renew_means(state, analysis.input[None]):  # its own means (DESIGN §5)
            analysis = kind.analyze(state.loaded, source, gradients=gradients)
    except ImageLoadError as exc:
        raise UserFacingError(str(exc), "image") from exc
    except ValueError as exc:  # e.g. an image smaller than one patch after preprocessing
        raise UserFacingError(f"{label}: {exc}", "image") from exc
    held = knocked_out(state)  # the analysis says what was knocked out (its npz and PNGs)
    ablation = state.intervention.ablation if held else "zero"
    analysis.intervention = InterventionRecord.of(held, ablation) if held else None
    state.analysis, state.source, state.label = analysis, source, label
    numbers = kind.image_numbers(state)
    display, scale = display_copy(analysis.source)  # as the model sees it (gray for 1 channel)
    left, top, right, bottom = analysis.geometry.region
    cams = kind.cam_layers(state.loaded.model)  # the CAM layer picker's blocks and auto
    return ImageResult(
        label=label,
        source_path=Path(source) if isinstance(source, (str, Path)) else None,
        display=display,
        display_scale=scale,
        region=(left * scale, top * scale, right * scale, bottom * scale),
        scores=getattr(state.loaded.model.config, "outputs", "logits"),
        mask_path=_mask_path(source),
        cam_blocks=cams.depth,
        cam_auto=cams.auto,
        cam_post_norm=cams.post_norm,
        knocked_out=held,
        ablation=ablation,
        seconds=time.perf_counter() - start,
        **{f.name: getattr(numbers, f.name) for f in fields(numbers)},
    )


def _mask_path(source: ImageSource | None) -> Path | None:
    from vitviz.explain.localisation import mask_path_for

    return mask_path_for(source) if isinstance(source, (str, Path)) else None


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


def compute_maps(state: EngineState, params: MapParams) -> MapsResult:
    """Raw maps of the query for every layer and head, plus the chosen method's map."""
    a = state.analysis
    if a is None:
        # after a model change, until the image is analysed again with it (the window waits)
        raise UserFacingError("No image has been analysed yet.", "no_image")
    kind = state.kind
    try:  # computed where the attention is; only the maps cross to the host
        q = kind.query_maps(state, params.query)
    except ValueError as exc:
        raise UserFacingError(str(exc), "image") from exc
    target = kind.default_class(state) if params.target_class is None else params.target_class
    method_map, error = None, None
    if params.method != "attention":  # attention: the head maps above are the map
        try:
            method_map = kind.method_map(
                state, params.method, params.query, params.target_class, params.params()
            )
        except ValueError as exc:
            error = str(exc)
    return MapsResult(
        params=params,
        head_maps=q.head_maps,
        mean_maps=q.mean_maps,
        method_map=method_map,
        target_class=target,
        prefix_attention=q.prefix_attention,
        levels=q.levels,
        error=error,
        layer_maps=q.layer_maps,
        query_tokens=q.query_tokens,
    )


def faithfulness(
    state: EngineState, method: str, params: dict[str, Any] | None = None, steps: int = 20
) -> FaithfulnessResult:
    """Deletion and insertion curves of ``method`` and of ``random`` on the current image (the
    query without a clicked cell, e.g. the CLS token; its top class), with the localisation
    numbers when a mask lies beside it; the kind's ``evaluate_faithfulness`` measures them."""
    from vitviz.explain.localisation import mask_grid_for

    a = state.analysis
    if a is None:
        raise UserFacingError("Open an image and a checkpoint first.", "no_image")
    names = list(dict.fromkeys([method, "random"]))
    mask_file = _mask_path(state.source)
    geometry = getattr(a, "geometry", None)  # None when the input came as a tensor
    given = {method: params or {}}
    try:
        mask = None
        if mask_file is not None and geometry is not None:
            mask = mask_grid_for(state.source, geometry)
        result = state.kind.evaluate_faithfulness(
            state, names, steps=steps, mask=mask, name=state.label, params=given
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
    """Write the current view ('view' PNG: the map on screen over the model input), the head
    grid ('heads' PNG: titled, on the grid's scale, shared or ``per_head``) or the numbers of
    ``vitviz-cli explain`` with the shown method, its parameters and class (.npz)."""
    from vitviz.imaging.overlay import save_png

    a = state.analysis
    if a is None:
        raise UserFacingError("Nothing to export yet: open an image and a checkpoint.", "export")
    kind = state.kind
    target = Path(path)
    try:
        if what == "npz":
            values = params.params()
            return kind.export_npz(state, target, params.method, values, params.target_class)
        if what == "heads":
            picture = kind.view_heads_picture(state, params.query, colormap, opacity, per_head)
            return save_png(picture, target)
        if current_map is None:
            raise UserFacingError("There is no map on screen to export.", "export")
        return save_png(kind.view_map_picture(state, current_map, colormap, opacity), target)
    except ValueError as exc:  # e.g. a method that can't run on this model
        raise UserFacingError(f"Nothing exported: {exc}", "export") from exc
    except OSError as exc:
        raise UserFacingError(f"Could not write {target}: {exc.strerror or exc}", "export") from exc


def load_model_code(state: EngineState, spec: ModelCodeSpec) -> ModelSummary:
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
