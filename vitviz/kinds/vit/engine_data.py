"""What the engine asks of a ViT, as plain numpy for the window (no Qt, no vitviz.workers).

A ViT has one grid of patch tokens after its prefix tokens in every layer: the clickable grid is
the patch grid, the head grid's thumbnails are drawn at it, a query is a patch (None: the CLS
token, or the mean of the patch queries without prefix tokens).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from PIL import Image
from torch import nn

from vitviz.imaging.colormaps import maps_levels
from vitviz.kindapi.protocol import (
    ImageNumbers,
    LayerGrid,
    LayerRow,
    ModelShape,
    QueryMaps,
    Session,
    TokenGeometry,
    ViewWords,
)

if TYPE_CHECKING:
    from vitviz.checkpoints.loaded import LoadedModel
    from vitviz.explain.faithfulness import ImageFaithfulness
    from vitviz.kinds.vit.analysis import Analysis
    from vitviz.pipeline.export import MapSettings

LOCAL_ATTENTION_BYTES = 96 * 2**20  # attention up to this size goes to the window (fast path)


def model_shape(loaded: LoadedModel) -> ModelShape:
    """Layers × heads, width, patch, the size it was trained at, classes and prefix tokens."""
    cfg = loaded.model.config
    layer_heads = int(getattr(cfg, "layer_heads", cfg.heads))  # a parallel block's P·H
    trained = "×".join(str(int(v)) for v in cfg.image_size)
    config = cfg.to_dict()
    return ModelShape(
        depth=cfg.depth,
        heads=layer_heads,
        num_prefix_tokens=cfg.num_prefix_tokens,
        config=config,
        headline=f"{cfg.depth} layers × {layer_heads} heads",
        architecture=(
            f"layers × heads: {cfg.depth} × {layer_heads}, dim {config.get('dim', '?')}, "
            f"patch {cfg.patch_size}, trained at {trained}",
            f"classes: {cfg.num_classes}; prefix tokens: {cfg.num_prefix_tokens}",
            "parts: " + "; ".join(loaded.kind.parts(loaded.model)),
        ),
    )


def check_memory(model: nn.Module, image_size: tuple[int, int]) -> None:
    from vitviz.kinds.vit.memory import check_analysis_memory

    check_analysis_memory(model, image_size)


def token_geometry(analysis: Analysis) -> TokenGeometry:
    """Every layer: the patch grid of ``patch_size`` tokens after the prefix tokens."""
    gh, gw = analysis.grid
    layer = LayerGrid(
        grid=(gh, gw),
        token_pixels=int(analysis.patch_size),
        num_prefix_tokens=int(analysis.num_prefix_tokens),
    )
    size = tuple(int(v) for v in analysis.input.shape[-2:])
    return TokenGeometry(
        input_size=size,
        grid=(gh, gw),
        cell_pixels=int(analysis.patch_size),
        layers=(layer,) * analysis.num_layers,
    )


def layer_rows(analysis: Analysis) -> tuple[LayerRow, ...]:
    """One row per captured layer: "L1", "L2", … in the head grid, "layer 3 of 12" in titles."""
    count, heads = int(analysis.num_layers), int(analysis.num_heads)
    return tuple(
        LayerRow(
            label=f"L{i}",
            heads=heads,
            title=f"layer {i} of 0–{count - 1}",
            hover=f"layer {i}",
        )
        for i in range(count)
    )


# the query without a click of a model whose head pools with an attention probe (MAP)
# (short: the query row has two lines; the map's title and docs/ say the rest)
PROBE_WORDS = "attention-pool probe (the head reads no CLS token)"
PROBE_MEAN_WORDS = "attention-pool probe (the mean of its {heads} heads)"


def words(num_prefix_tokens: int, probe: bool = False, probe_heads: int = 0) -> ViewWords:
    """The window's words for a ViT: layers, patches, the CLS token (or the mean of patches,
    or the attention pool's probe; ``probe_heads``: its heads where they differ from the
    layers')."""
    if probe:
        query = PROBE_MEAN_WORDS.format(heads=probe_heads) if probe_heads else PROBE_WORDS
        return ViewWords(
            query_none=query,
            title_query_none="query: attention-pool probe",
            query_reset="Reset to the probe",
        )
    if num_prefix_tokens:
        return ViewWords(query_none="CLS token")
    return ViewWords(query_none="mean of patches", title_query_none="query: mean of patches")


def unavailable(analysis: Analysis) -> dict[str, str]:
    """{method name: why it can't run on this model} over the method table."""
    from vitviz.explain.methods import all_methods

    reasons = {m.name: m.unavailable(analysis) for m in all_methods()}
    return {name: why for name, why in reasons.items() if why is not None}


def shareable_attention(analysis: Analysis) -> np.ndarray | None:
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


def image_numbers(session: Session) -> ImageNumbers:
    """The numbers the window shows; a model with an attention probe keeps its attention with
    the engine (the probe's row is the query None's last layer, which the window's own maps
    of the attention array would not give)."""
    from vitviz.explain.methods import ignored_parameters

    a = session.analysis
    probe = getattr(a, "probe_attention", None) is not None
    return ImageNumbers(
        input_pixels=a.pixels,
        grid=a.grid,
        patch_size=a.patch_size,
        num_prefix_tokens=a.num_prefix_tokens,
        num_layers=a.num_layers,
        num_heads=a.num_heads,
        class_names=list(a.class_names),
        probs=a.probs.numpy(),
        logits=a.logits.numpy(),
        top_class=a.top_class,
        mean_distance=a.mean_distance.numpy(),
        entropy=a.entropy.numpy(),
        prefix_share=a.prefix_share.numpy(),
        token_norms=a.token_norms.numpy(),
        device=a.device,
        attention=None if probe else shareable_attention(a),
        unavailable=unavailable(a),
        ignored_params=ignored_parameters(session.kind),
        thumb_grid=tuple(a.grid),
        thumb_pixels=int(a.patch_size),
        layer_rows=layer_rows(a),
        token_geometry=token_geometry(a),
        words=words(a.num_prefix_tokens, probe, _differing_probe_heads(a)),
    )


def _differing_probe_heads(a: Analysis) -> int:
    """The attention pool probe's heads where they are not the layers' count, else 0."""
    probe = getattr(a, "probe_attention", None)
    return 0 if probe is None or probe.shape[0] == a.num_heads else int(probe.shape[0])


def query_tokens(
    query: tuple[int, int] | None, grid: tuple[int, int], layers: int
) -> tuple[int, ...]:
    """Per layer the query patch's index in the grid (−1: the CLS or the mean)."""
    token = -1 if query is None else query[0] * grid[1] + query[1]
    return (token,) * layers


def query_maps(session: Session, query: tuple[int, int] | None) -> QueryMaps:
    """The query's attention, computed where the attention is (only the maps cross)."""
    a = session.analysis
    head_maps, mean_maps, prefix = a.host_query_maps(query)
    return QueryMaps(
        head_maps=head_maps,
        mean_maps=mean_maps,
        layer_maps=tuple(head_maps),  # every layer at the patch grid
        prefix_attention=prefix,
        query_tokens=query_tokens(query, tuple(a.grid), head_maps.shape[0]),
        levels=maps_levels(head_maps, mean_maps),
    )


def method_map(
    session: Session,
    method: str,
    query: tuple[int, int] | None,
    target_class: int | None,
    params: Mapping[str, Any],
) -> np.ndarray:
    from vitviz.explain.methods import get_method

    a = session.analysis
    return get_method(method)(a, query, target_class, dict(params), strict=False).numpy()


def evaluate_faithfulness(
    session: Session,
    names: Sequence[str],
    *,
    steps: int,
    mask: np.ndarray | None,
    name: str,
    params: Mapping[str, Mapping[str, Any]],
) -> ImageFaithfulness:
    from vitviz.explain.faithfulness import evaluate_methods

    return evaluate_methods(
        session.analysis, list(names), steps=steps, mask=mask, name=name, params=params
    )


def _export_settings(
    analysis: Analysis, method: str, values: Mapping[str, Any], target_class: int | None
) -> MapSettings:
    """The npz's maps: today's three with the shown method's shared settings (fusion, discard
    ratio, start layer), plus the shown method's own map when it can run."""
    from vitviz.explain.methods import get_method
    from vitviz.pipeline import export as ex

    shared = {k: values[k] for k in ex.SHARED_PARAMETERS if k in values}
    m = get_method(method)
    extra = () if method == "attention" or m.unavailable(analysis) else (m.name,)
    return ex.MapSettings(
        **shared, target_class=target_class, methods=extra, params={m.name: dict(values)}
    )


def export_npz(
    session: Session,
    path: Path,
    method: str,
    params: Mapping[str, Any],
    target_class: int | None,
) -> Path:
    from vitviz.pipeline import export as ex

    a = session.analysis
    settings = _export_settings(a, method, params, target_class)
    return ex.write_npz(a, ex.compute_maps(a, settings), path)


def heads_picture(
    session: Session,
    query: tuple[int, int] | None,
    colormap: str,
    opacity: float,
    per_head: bool,
) -> Image.Image:
    from vitviz.kinds.vit import pictures

    return pictures.heads_grid(session.analysis, colormap, opacity, query, per_head)


def map_picture(session: Session, values: np.ndarray, colormap: str, opacity: float) -> Image.Image:
    from vitviz.kinds.vit import pictures

    return pictures.map_overlay(session.analysis, values, colormap, opacity)
