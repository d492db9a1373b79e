"""The ViT's pictures: a map over the source image and the layer × head grid (the explain PNGs
and the window's File ▸ Export), drawn with the shared figure parts of ``vitviz.pipeline.export``.
"""

from __future__ import annotations

import numpy as np
from PIL import Image

from vitviz.imaging.figure import titled_figure
from vitviz.imaging.overlay import fit_for_overlay, overlay_on_image
from vitviz.imaging.reduction import OVERLAY_MAX_SIDE
from vitviz.kinds.vit.analysis import Analysis
from vitviz.pipeline.export import heads_figure, map_levels, prediction_text


def map_overlay(
    analysis: Analysis,
    map_: np.ndarray,
    colormap: str = "viridis",
    opacity: float = 0.6,
    max_side: int | None = OVERLAY_MAX_SIDE,
) -> Image.Image:
    """A (gh, gw) map over the source image (or, for a tensor input, the model input).

    The overlay is the source's size, scaled down to at most ``max_side`` pixels on its long
    side; None keeps the source's size (the full image needs ``analyze(..., max_side=None)``,
    which keeps the source at full size).
    """
    if analysis.source is not None:
        image, geometry = fit_for_overlay(analysis.source, analysis.geometry, max_side)
        return overlay_on_image(image, map_, geometry=geometry, colormap=colormap, opacity=opacity)
    return overlay_on_image(analysis.pixels, map_, colormap=colormap, opacity=opacity)


def heads_grid(
    analysis: Analysis,
    colormap: str = "viridis",
    opacity: float = 0.6,
    patch: tuple[int, int] | None = None,
    per_head: bool = False,
    titled: bool = True,
) -> Image.Image:
    """The layer × head grid of the query's (default CLS) maps with a mean-of-heads column, as
    the window's head grid shows it: one shared colour scale, or each tile its own
    (``per_head``); ``titled``: with a title and a colour bar (``heads_figure``)."""
    maps = analysis.all_attention_maps(patch).numpy()  # (L, H, gh, gw)
    if patch is not None:
        query = f"query patch ({patch[0]}, {patch[1]})"
    else:
        query = "query CLS" if analysis.num_prefix_tokens else "query: mean of the patches"
    return heads_figure(
        maps,
        maps.mean(axis=1),
        analysis,
        row_names=[f"L{i}" for i in analysis.layer_indices],  # the kept layers, from 0
        title=f"Attention of every layer and head · {prediction_text(analysis)}",
        query=query,
        colormap=colormap,
        opacity=opacity,
        per_head=per_head,
        titled=titled,
    )


def vit_map_picture(
    analysis: Analysis,
    map_: np.ndarray,
    colormap: str,
    max_side: int | None,
    title: list[str] | None,
) -> Image.Image:
    """A ViT's map over its source image (``map_overlay``), titled with a colour bar when
    ``title`` is given."""
    picture = map_overlay(analysis, map_, colormap, max_side=max_side)
    if title is not None:
        picture = titled_figure(picture, title, map_levels(map_), colormap)
    return picture
