"""What the window exports for a Swin, through the one writer of ``vitviz.pipeline.export`` that
``vitviz-cli explain`` uses for every kind (so they agree): the npz of docs/cli.md's table (the
shared keys, a Swin's own arrays, ``map_<name>`` of each method asked for) and each map over the
model input (``swin_map_picture``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image
from torch import nn

from vitviz.explain.methods import get_method
from vitviz.imaging.overlay import overlay_on_image
from vitviz.kindapi import ModelKind
from vitviz.kinds.swin.analysis import SwinAnalysis
from vitviz.pipeline.export import ExplainedMaps, MapSettings, compute_maps, write_npz

ALWAYS = ("rollout",)  # written for every analysis under its own key, whatever else is asked
OPACITY = 0.6  # the CLI's PNGs (the window's view export uses the slider's)


def export_settings(
    kind: ModelKind,
    model: nn.Module,
    has_head: bool,
    method: str,
    values: Mapping[str, Any],
    target_class: int | None = None,
) -> MapSettings:
    """The window's npz export: the maps ``vitviz-cli explain --method <method>`` writes, with
    the shown method's ``values`` (those a Swin version does not take are dropped: the window
    disables their controls). A method a Swin can't take, rollout (written anyway) or
    attention adds no ``map_<name>``."""
    m = get_method(method)
    usable = m.unavailable_on(model, has_head, kind=kind) is None
    methods = (method,) if usable and method not in (*ALWAYS, "attention") else ()
    given = {method: values} if usable else {}
    layers, heads = kind.parameter_bounds(model)
    params = {
        n: get_method(n).values_for(kind, given.get(n), layers, heads, strict=False)
        for n in (*ALWAYS, *methods)
    }
    return MapSettings(methods=methods, params=params, target_class=target_class)


def swin_output_maps(
    analysis: SwinAnalysis, model: nn.Module, settings: MapSettings
) -> ExplainedMaps:
    """The maps the npz holds (``vitviz.pipeline.export.compute_maps``) for the average-pool query.
    ValueError for a setting the analysis can't serve (e.g. a head out of range)."""
    return compute_maps(analysis, settings)


def write_swin_npz(
    analysis: SwinAnalysis,
    class_names: Sequence[str],
    maps: ExplainedMaps,
    path: str | os.PathLike[str],
) -> Path:
    """The npz at ``path`` (``vitviz.pipeline.export.write_npz``) with the checkpoint's
    ``class_names``, written atomically."""
    return write_npz(analysis, maps, path, class_names)


def swin_map_picture(
    analysis: SwinAnalysis, map_: np.ndarray, colormap: str, opacity: float = OPACITY
) -> Image.Image:
    """A map of any of the Swin's grids coloured over the model input (its pixels' size)."""
    return overlay_on_image(analysis.pixels, np.asarray(map_), colormap=colormap, opacity=opacity)
