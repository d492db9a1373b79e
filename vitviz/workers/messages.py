"""What crosses between the window and the engine thread: plain data, numpy only."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

METHODS = ("attention", "rollout", "gradient_rollout", "relevance", "dino_masks")
METHOD_LABELS = {
    "attention": "Attention (layer, head)",
    "rollout": "Attention rollout",
    "gradient_rollout": "Gradient rollout",
    "relevance": "Relevance (Chefer)",
    "dino_masks": "DINO masks",
}


@dataclass(frozen=True)
class ModelSummary:
    """What the window shows about the loaded model."""

    name: str
    family: str
    path: Path | None
    num_classes: int
    depth: int
    heads: int
    patch_size: int
    image_size: tuple[int, int]
    num_prefix_tokens: int
    device: str
    preprocessing: dict[str, Any]
    notes: tuple[str, ...] = ()
    provenance: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class MapParams:
    """Everything that decides the maps on screen except the image and the model."""

    query: tuple[int, int] | None = None  # (row, col) patch, or None for CLS
    method: str = "attention"
    fusion: str = "mean"
    discard_ratio: float = 0.0
    start_layer: int = 0
    target_class: int | None = None  # None: the top prediction
    threshold: float = 0.6  # DINO masks


@dataclass
class ImageResult:
    """One analysed image: the pictures and numbers that do not depend on MapParams."""

    label: str  # file name or "clipboard"
    source_path: Path | None
    display: np.ndarray  # (h, w, 3) uint8, the source image (downscaled if very large)
    display_scale: float  # display pixels per source pixel
    region: tuple[float, float, float, float]  # input region in display pixels (l, t, r, b)
    input_pixels: np.ndarray  # (H, W, 3) uint8, the model input before normalisation
    grid: tuple[int, int]  # (gh, gw)
    patch_size: int
    num_prefix_tokens: int
    num_layers: int
    num_heads: int
    class_names: list[str]
    probs: np.ndarray  # (C,) float32
    logits: np.ndarray  # (C,) float32
    top_class: int  # -1 without a head
    mean_distance: np.ndarray  # (L, H)
    entropy: np.ndarray  # (L, H)
    prefix_share: np.ndarray  # (L, H)
    token_norms: np.ndarray  # (L, N)
    device: str
    seconds: float
    attention: np.ndarray | None = None  # (L, H, N, N) float32, read-only; None when large


@dataclass
class MapsResult:
    """The maps for one MapParams."""

    params: MapParams
    head_maps: np.ndarray  # (L, H, gh, gw) raw attention of the query
    mean_maps: np.ndarray  # (L, gh, gw) mean over heads
    method_map: np.ndarray | None  # (gh, gw) rollout / gradient rollout / relevance
    masks: np.ndarray | None  # (L, H, gh, gw) bool, DINO masks
    target_class: int
    prefix_attention: np.ndarray  # (L, H, num_prefix)
    levels: tuple[float, float] = (0.0, 1.0)  # shared colour scale of the head grid
    error: str | None = None  # a method that could not run (e.g. no head for relevance)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class UserError:
    """An expected mistake (not an image, unknown checkpoint): a short message, nothing changes."""

    message: str
    # "image" | "checkpoint" | "settings" | "export" | "device" | "no_image" | "error"
    kind: str = "error"
    details: dict[str, Any] = field(default_factory=dict)  # e.g. the settings a checkpoint needs
