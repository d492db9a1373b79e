"""Writing an analysis of any kind out: the .npz of numbers and the overlay PNGs (same for the
CLI and the window). One vocabulary (docs/cli.md, "The .npz"): the same method writes the same key
for every kind (``rollout``, ``gradient_rollout``, ``relevance``, ``map_<name>``), ``kind``
names the kind, ``model_name`` and ``model_arch`` the model as people know it, and the kind adds
its own arrays (``ModelKind.npz_arrays``: a ViT's ``attention``, a Swin's
``window_attention_<stage>_<block>``, ...). Every titled picture names the model analysed
(``model_line``), read here from the analysis's checkpoint, whatever its kind."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from vitviz.checkpoints.atomic import atomic_path
from vitviz.checkpoints.loaded import LoadedModel
from vitviz.explain.feature_methods import feature_arrays
from vitviz.explain.methods import Method, carried_kind, get_method
from vitviz.imaging.figure import titled_figure
from vitviz.imaging.overlay import head_grid_image, save_png
from vitviz.imaging.reduction import OVERLAY_MAX_SIDE
from vitviz.kindapi import KindAnalysis
from vitviz.kindapi.feature_sites import DEFAULT_LAYER
from vitviz.pipeline.intervention_record import intervention_arrays, intervention_line

# the shared keys, then a ViT's own (``ModelKind.npz_arrays``), in the order written
SHARED_NPZ_KEYS = (
    "kind",
    "model_name",
    "model_arch",
    "model_name",
    "model_arch",
    "input",
    "logits",
    "probs",
    "class_names",
    "rollout",
    "gradient_rollout",
    "relevance",
    "target_class",
)
NPZ_KEYS = (
    "kind",
    "model_name",
    "model_arch",
    "input",
    "logits",
    "probs",
    "class_names",
    "attention",
    "grid",
    "num_prefix_tokens",
    "rollout",
    "gradient_rollout",
    "relevance",
    "target_class",
    "mean_distance",
    "entropy",
    "layers",
    "logit_lens",
    "token_norms",
)


# Today's maps: npz key -> the table's method (DESIGN §5). Written for every analysis, NaN where
# the method can't run (no classification head); PNGs for those in LEGACY_PNGS.
LEGACY_MAPS = (
    ("rollout", "rollout"),
    ("gradient_rollout", "gradient-rollout"),
    ("relevance", "relevance"),
)
LEGACY_PNGS = ("rollout", "relevance")
# MapSettings' shared fields -> the parameter of that name, on every method that has one
SHARED_PARAMETERS = ("fusion", "discard_ratio", "start_layer")


@dataclass(frozen=True)
class MapSettings:
    """The settings the exported maps were computed with (DESIGN §5 defaults).

    ``fusion``, ``discard_ratio`` and ``start_layer`` go to every method that has a parameter
    of that name; ``params`` ({method: {parameter: value}}) win over them. ``methods``: table
    methods whose maps are added to the npz as ``map_<name>`` and as ``<stem>_<name>.png``.
    """

    fusion: str = "mean"
    discard_ratio: float = 0.0
    start_layer: int = 0
    target_class: int | None = None  # None: the top prediction
    methods: tuple[str, ...] = ()
    params: Mapping[str, Mapping[str, Any]] = field(default_factory=dict, hash=False)

    def params_for(self, method: Method, analysis: KindAnalysis | None = None) -> dict[str, Any]:
        """The parameter values this record gives ``method`` (the rest keep their defaults);
        with ``analysis``, only those its kind's version of the method takes."""
        names = {p.name for p in method.parameters}
        if analysis is not None:
            names = set(method.taken_parameters(carried_kind(analysis)))
        out = {k: getattr(self, k) for k in SHARED_PARAMETERS if k in names}
        out.update(self.params.get(method.name, {}))
        return out


@dataclass
class ExplainedMaps:
    rollout: np.ndarray  # (gh, gw) float32
    gradient_rollout: np.ndarray  # (gh, gw) float32; NaN for a model without a head
    relevance: np.ndarray  # (gh, gw) float32; NaN for a model without a head
    target_class: int  # -1 for a model without a head
    methods: dict[str, np.ndarray] = field(default_factory=dict)  # MapSettings.methods' maps

    def method_arrays(self) -> dict[str, np.ndarray]:
        """{map_<name with - as _>: (gh, gw) float32} of the methods asked for."""
        return {get_method(name).key: m for name, m in self.methods.items()}


# Longest output stem in UTF-8 bytes: with "_<method>.png" and the atomic writer's temporary
# prefix and suffix the file name stays well inside the 255 bytes file systems allow.
MAX_STEM_BYTES = 160


def output_stem(stem: str) -> str:
    """``stem`` as the base of output file names: unchanged when short, else cut and made unique
    again by 8 hex digits of its hash (two long names that share a
    beginning still get two outputs)."""
    raw = os.fsencode(stem)
    if len(raw) <= MAX_STEM_BYTES:
        return stem
    digest = hashlib.sha256(raw).hexdigest()[:8]
    cut = os.fsdecode(raw[: MAX_STEM_BYTES - 9])  # a split character keeps its bytes
    return f"{cut}-{digest}"


def analysed_model(analysis: KindAnalysis) -> LoadedModel | None:
    """The checkpoint ``analysis`` was made from (every kind's analysis keeps it as ``loaded``);
    None for a bare model's analysis (a network given without a checkpoint)."""
    loaded = getattr(analysis, "loaded", None)
    return loaded if isinstance(loaded, LoadedModel) else None


def model_line(analysis: KindAnalysis) -> list[str]:
    """The title line naming the model analysed ("model timm/vit_small_patch16_224.augreg_in21k
    _ft_in1k · vit_small_patch16_224"), as the window's title does; none for a bare model."""
    loaded = analysed_model(analysis)
    return [] if loaded is None else [f"model {loaded.known_words}"]


def _has_head(analysis: KindAnalysis) -> bool:
    return bool(getattr(analysis, "has_head", analysis.logits.numel() > 0))


def method_map(
    analysis: KindAnalysis, name: str, settings: MapSettings = MapSettings()
) -> np.ndarray:
    """The table's map ``name`` of the CLS query (a Swin: the average pool) for ``settings``:
    float32 over the clickable grid (or the grid of the layer it reads). ValueError (plain)
    when the method can't run on this analysis or a parameter is wrong."""
    method = get_method(name)
    target = settings.target_class if _has_head(analysis) else None
    out = method(analysis, None, target, settings.params_for(method, analysis))
    return out.numpy().astype(np.float32)


def compute_maps(analysis: KindAnalysis, settings: MapSettings = MapSettings()) -> ExplainedMaps:
    """Today's maps (rollout, gradient rollout, relevance; NaN over the clickable grid where
    the method can't run on this analysis) and those of ``settings.methods``, all of the CLS
    query (a Swin: the average pool), computed by the method table."""
    today = {}
    grid = carried_kind(analysis).token_geometry(analysis).grid
    for key, name in LEGACY_MAPS:
        if get_method(name).unavailable(analysis) is not None:
            today[key] = np.full(grid, np.nan, dtype=np.float32)
        else:
            today[key] = method_map(analysis, name, settings)
    extra = {name: method_map(analysis, name, settings) for name in dict.fromkeys(settings.methods)}
    if not _has_head(analysis):
        c = -1
    else:
        c = analysis.top_class if settings.target_class is None else int(settings.target_class)
    return ExplainedMaps(**today, target_class=c, methods=extra)


def npz_arrays(
    analysis: KindAnalysis, maps: ExplainedMaps, class_names: Sequence[str] | None = None
) -> dict[str, np.ndarray]:
    """Every array of one analysis's npz, in the order written: the shared keys in
    ``NPZ_KEYS`` order, then the kind's own others, then ``map_<name>`` of each method.
    ``class_names``: the checkpoint's (default: the analysis's)."""
    kind = carried_kind(analysis)
    if class_names is None:
        class_names = analysis.class_names
    loaded = analysed_model(analysis)
    shared = {
        "kind": np.array(kind.name, dtype=str),
        "model_name": np.array(loaded.known_name if loaded else "", dtype=str),
        "model_arch": np.array(loaded.architecture_name if loaded else kind.label, dtype=str),
        "input": analysis.input.detach().cpu().numpy().astype(np.float32),
        "logits": analysis.logits.detach().cpu().numpy().astype(np.float32),
        "probs": analysis.probs.detach().cpu().numpy().astype(np.float32),
        "class_names": np.array(list(class_names), dtype=str),
        "rollout": maps.rollout,
        "gradient_rollout": maps.gradient_rollout,
        "relevance": maps.relevance,
        "target_class": np.array(maps.target_class, dtype=np.int64),
    }
    shared.update(feature_arrays(analysis))  # logit_lens, token_norms (DESIGN §5)
    own = kind.npz_arrays(analysis)
    own = {k: v for k, v in own.items() if k not in shared}  # the shared ones win
    arrays = {**shared, **own}
    order = [k for k in NPZ_KEYS if k in arrays] + [k for k in arrays if k not in NPZ_KEYS]
    out = {k: arrays[k] for k in order}
    out.update(maps.method_arrays())
    out.update(intervention_arrays(analysis))  # an intervened model's: what was knocked out
    return out


def write_npz(
    analysis: KindAnalysis,
    maps: ExplainedMaps,
    path: str | os.PathLike[str],
    class_names: Sequence[str] | None = None,
) -> Path:
    """All the numbers of one analysis, written atomically (``npz_arrays``): for a ViT exactly
    the keys of ``NPZ_KEYS``, then ``map_<name with - as _>`` for each method of
    ``maps.methods``.

    ``layers`` (K,) int64 names the 0-based model layer of each row of ``attention``,
    ``mean_distance`` and ``entropy`` (0..L-1 unless the analysis kept fewer layers; then the
    maps that need every layer are NaN, as for a model without a head)."""
    arrays = npz_arrays(analysis, maps, class_names)
    target = Path(path)
    with atomic_path(target) as tmp, open(tmp, "wb") as f:
        np.savez(f, **arrays)
    return target


PER_HEAD_TICKS = ((0.0, "0"), (1.0, "each tile's max"))


def heads_figure(
    maps: np.ndarray,
    means: np.ndarray,
    analysis: KindAnalysis,
    *,
    row_names: list[str],
    title: str,
    query: str,
    colormap: str = "viridis",
    opacity: float = 0.6,
    per_head: bool = False,
    titled: bool = True,
) -> Image.Image:
    """The head grid picture of (L, H, gh, gw) ``maps`` and their (L, gh, gw) ``means`` over
    ``analysis``'s pixels: rows ``row_names``, columns mean, H0, …; ``titled``: ``title``, the
    query and the scale, the model (``model_line``) and what was knocked out of it above it and
    a colour bar beside it (per head: 0 to each tile's max; shared: the window's head-grid
    scale, 0 to a round number above the largest value)."""
    from vitviz.imaging.colormaps import maps_levels

    levels = None if per_head else maps_levels(maps, means)
    grid = head_grid_image(
        maps,
        analysis.pixels,
        colormap=colormap,
        opacity=opacity,
        levels=levels,
        row_names=row_names,
        means=means,
        per_head=per_head,
    )
    if not titled:
        return grid
    scale = "each tile on its own scale (0 to its max)" if per_head else "one colour scale"
    lines = [
        title,
        f"{query} · columns: mean of heads, H0, H1, … · {scale}",
        *model_line(analysis),
        *intervention_line(analysis),
    ]
    ticks = PER_HEAD_TICKS if per_head else None
    return titled_figure(grid, lines, levels or (0.0, 1.0), colormap, ticks)


def prediction_text(analysis: KindAnalysis) -> str:
    """'prediction 'tabby' (43.1%)', or that the model has no classification head."""
    if not _has_head(analysis):
        return "no classification head"
    c = analysis.top_class
    return f"prediction '{analysis.class_names[c]}' ({float(analysis.probs[c]):.1%})"


def map_levels(map_: np.ndarray) -> tuple[float, float]:
    """The values the overlay's colours run between: the map's finite min..max (0..1 if none)."""
    finite = map_[np.isfinite(map_)]
    return (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)


def _value_words(analysis: KindAnalysis, name: str, value: Any) -> str:
    """A parameter's value in a map's title: a CAM layer ``auto`` with the layer it reads
    (``auto (3.norm1)``, DESIGN §5), as the window's picker says it."""
    loaded = analysed_model(analysis)
    if name != "layer" or value != DEFAULT_LAYER or loaded is None:
        return str(value)
    auto = carried_kind(analysis).cam_layers(loaded.model).auto
    return f"{value} ({auto})" if auto else str(value)


def map_title(
    analysis: KindAnalysis, maps: ExplainedMaps, name: str, settings: MapSettings | None = None
) -> list[str]:
    """Title lines of a map's figure: method and class with its probability; then the query
    and, when ``settings`` are given, the method's parameter values; then the model and what
    was knocked out of it."""
    method = get_method(name)
    if maps.target_class < 0 or not _has_head(analysis):
        said = "no classification head"
    elif method.needs_head:
        c = maps.target_class
        said = f"class '{analysis.class_names[c]}' ({float(analysis.probs[c]):.1%})"
    else:
        said = prediction_text(analysis)
    detail = "query CLS"
    if settings is not None and method.parameters:
        values = method.resolve(settings.params_for(method, analysis), strict=False)
        said_values = (f"{k} {_value_words(analysis, k, v)}" for k, v in values.items())
        detail += " · " + ", ".join(said_values)
    return [
        f"{method.label} · {said}",
        detail,
        *model_line(analysis),
        *intervention_line(analysis),
    ]


def rgb_map_picture(
    analysis: KindAnalysis, rgb: np.ndarray, max_side: int | None, title: list[str] | None
) -> Image.Image:
    """An RGB map (h, w, 3) in [0, 1] drawn by the kind: each channel drawn in grey by its
    ``map_picture`` (same place, size and title as any map), the three pictures' own channel
    merged, so the colours lie over the image at the kind's opacity."""
    kind = carried_kind(analysis)
    channels = [
        np.asarray(kind.map_picture(analysis, rgb[..., c], "grey", max_side, title).convert("RGB"))
        for c in range(3)
    ]
    return Image.fromarray(np.stack([ch[..., c] for c, ch in enumerate(channels)], axis=-1))


def write_pngs(
    analysis: KindAnalysis,
    maps: ExplainedMaps,
    folder: str | os.PathLike[str],
    stem: str,
    colormap: str = "viridis",
    max_side: int | None = OVERLAY_MAX_SIDE,
    titled: bool = False,
    settings: MapSettings | None = None,
) -> list[Path]:
    """<stem>_rollout.png, <stem>_relevance.png (if it could be computed), <stem>_<name>.png
    for each method of ``maps.methods``, and the kind's head grid <stem>_heads.png where it
    draws one (a ViT).

    Each map is drawn by its kind (``ModelKind.map_picture``: a ViT's over the source image at
    most ``max_side`` pixels on its long side, None: the source's own size, see
    ``map_overlay``; a Swin's over the model input). ``titled``: the kind may add a title
    (method, class, probability; ``settings`` add the parameter values) and a colour bar of
    its scale, to the maps and the heads PNG."""
    kind = carried_kind(analysis)
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    overlays = {name: getattr(maps, name) for name in LEGACY_PNGS}
    overlays.update(maps.methods)  # the same method (and settings) gives the same map
    written = []
    for name, m in overlays.items():
        if np.isnan(m).all():
            continue
        path = out / f"{stem}_{name}.png"
        lines = map_title(analysis, maps, name, settings) if titled else None
        if m.ndim == 3:  # an RGB map (DESIGN §5): its colours, where the kind draws a map
            save_png(rgb_map_picture(analysis, m, max_side, lines), path)
        else:
            save_png(kind.map_picture(analysis, m, colormap, max_side, lines), path)
        written.append(path)
    heads = kind.heads_picture(analysis, colormap, titled)
    if heads is not None:
        path = out / f"{stem}_heads.png"
        save_png(heads, path)
        written.append(path)
    return written
