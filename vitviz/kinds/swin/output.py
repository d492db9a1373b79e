"""What is written for a Swin, by ``vitviz-cli explain`` and by the window's export alike: the npz
(``swin_arrays`` of issue 16 item 2, ``class_names``, ``input`` and ``map_<name>`` of each map)
and ``<stem>_<name>.png``, each map over the model input. One writer for both, so they agree.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from vitviz.checkpoints.atomic import atomic_path
from vitviz.explain.methods import get_method
from vitviz.imaging.overlay import overlay_on_image, save_png
from vitviz.kinds.swin.analysis import SwinAnalysis
from vitviz.kinds.swin.export import swin_arrays
from vitviz.kinds.swin.methods import swin_method_map

ALWAYS = ("rollout",)  # written for every Swin, whatever else is asked
OPACITY = 0.6  # the CLI's PNGs (the window's view export uses the slider's)


@dataclass(frozen=True)
class SwinMapSettings:
    """The maps written: rollout, then ``methods`` (table names a Swin takes), each with its
    resolved Swin parameters (``swin_params``) for class ``target_class`` (None: the top)."""

    methods: tuple[str, ...] = ()
    params: Mapping[str, Mapping[str, Any]] = field(default_factory=dict, hash=False)
    target_class: int | None = None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys([*ALWAYS, *self.methods]))


def export_settings(
    model: Any,
    has_head: bool,
    method: str,
    values: Mapping[str, Any],
    target_class: int | None = None,
) -> SwinMapSettings:
    """The window's npz export: the maps ``vitviz-cli explain --method <method>`` writes, with
    the shown method's ``values`` (those a Swin version does not take are dropped: the window
    disables their controls). A method a Swin can't take, or attention, adds nothing."""
    from vitviz.kinds.swin.methods import swin_params, swin_unavailable

    usable = swin_unavailable(method, method, has_head, model) is None
    methods = (method,) if usable and method not in (*ALWAYS, "attention") else ()
    given = {method: values} if usable else {}
    blocks, heads = int(model.config.depth), max(int(h) for h in model.config.heads)
    params = {
        m: swin_params(m, given.get(m), blocks, heads, strict=False) for m in (*ALWAYS, *methods)
    }
    return SwinMapSettings(methods, params, target_class)


def swin_output_maps(
    analysis: SwinAnalysis, model: Any, settings: SwinMapSettings
) -> dict[str, np.ndarray]:
    """{method: its float32 map} for the average-pool query (no clicked token): rollouts over
    the first stage's grid, attention at its block's resolution, Grad-CAM over the last
    stage's. ValueError for a setting the analysis can't serve (e.g. a head out of range)."""
    out = {}
    for name in settings.names:
        m = swin_method_map(
            analysis, model, name, None, settings.target_class, settings.params.get(name)
        )
        out[name] = m.float().numpy()
    return out


def swin_npz_arrays(
    analysis: SwinAnalysis, class_names: Sequence[str], maps: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """``swin_arrays`` plus the class names, the normalised model input (C, H, W) and each map
    as ``map_<name>``."""
    arrays = swin_arrays(analysis)
    arrays["class_names"] = np.array(list(class_names), dtype=str)
    arrays["input"] = analysis.input.detach().cpu().numpy().astype(np.float32)
    for name, values in maps.items():
        arrays[get_method(name).key] = np.asarray(values, dtype=np.float32)
    return arrays


def write_swin_npz(
    analysis: SwinAnalysis,
    class_names: Sequence[str],
    maps: Mapping[str, np.ndarray],
    path: str | os.PathLike[str],
) -> Path:
    """The npz at ``path``, written atomically (a failed write leaves no half file)."""
    target = Path(path)
    with atomic_path(target) as tmp, open(tmp, "wb") as f:
        np.savez(f, **swin_npz_arrays(analysis, class_names, maps))
    return target


def swin_map_picture(
    analysis: SwinAnalysis, map_: np.ndarray, colormap: str, opacity: float = OPACITY
) -> Image.Image:
    """A map of any of the Swin's grids coloured over the model input (its pixels' size)."""
    return overlay_on_image(analysis.pixels, np.asarray(map_), colormap=colormap, opacity=opacity)


def write_swin_pngs(
    analysis: SwinAnalysis,
    maps: Mapping[str, np.ndarray],
    folder: str | os.PathLike[str],
    stem: str,
    colormap: str,
) -> list[Path]:
    """``<folder>/<stem>_<name>.png`` for each map."""
    return [
        save_png(swin_map_picture(analysis, m, colormap), Path(folder) / f"{stem}_{name}.png")
        for name, m in maps.items()
    ]
