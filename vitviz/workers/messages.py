"""What crosses between the window and the engine thread: plain data, numpy only."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

OLD_METHOD_NAMES = {"gradient_rollout": "gradient-rollout", "dino_masks": "dino-masks"}


@dataclass(frozen=True)
class ParamInfo:
    """One parameter of a method, as the window builds its control (from the method table)."""

    name: str
    type: str  # "int" | "float" | "str" | "bool"
    default: Any
    label: str
    range: tuple[float, float | None] | None = None  # inclusive; None upper: the model's
    choices: tuple[Any, ...] | None = None
    per: str | None = None  # "layer" | "head": an index into the model's layers or heads
    step: float | None = None
    help: str = ""


@dataclass(frozen=True)
class MethodInfo:
    """One entry of the method table, as plain data for the window (which never imports torch)."""

    name: str
    label: str
    parameters: tuple[ParamInfo, ...] = ()
    needs_gradients: bool = False
    queries: bool = True  # a clicked patch changes the map
    scaling: str = "none"  # none | max | min-max | share
    description: str = ""


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
    method: str = "attention"  # a name of the method table (vitviz.explain.methods)
    values: tuple[tuple[str, Any], ...] = ()  # the method's parameters, (name, value) pairs
    target_class: int | None = None  # None: the top prediction

    def params(self) -> dict[str, Any]:
        """The method's parameters as a dict (those not given take the table's defaults)."""
        return dict(self.values)


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
    unavailable: dict[str, str] = field(default_factory=dict)  # method name -> why it can't run
    mask_path: Path | None = None  # <stem>_mask.png beside the image (localisation numbers)
    scores: str = "logits"  # what the model returns: logits, probabilities, log-probabilities

    def geometry(self) -> tuple:
        """What the window's geometry-bound state (query, hover, thumbnails, selection) depends
        on: equal for two images of one model, different after most model changes."""
        return (
            type(self).__name__,
            self.grid,
            self.patch_size,
            self.input_pixels.shape[:2],
            self.num_prefix_tokens,
            self.num_layers,
            self.num_heads,
        )


@dataclass
class MapsResult:
    """The maps for one MapParams."""

    params: MapParams
    head_maps: np.ndarray  # (L, H, gh, gw) raw attention of the query
    mean_maps: np.ndarray  # (L, gh, gw) mean over heads
    method_map: np.ndarray | None  # (gh, gw) the method's map (None: attention, or an error)
    target_class: int
    prefix_attention: np.ndarray  # (L, H, num_prefix)
    levels: tuple[float, float] = (0.0, 1.0)  # shared colour scale of the head grid
    error: str | None = None  # a method that could not run (e.g. no head for relevance)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CurvesResult:
    """One method's deletion and insertion curves on the current image (p_0 … p_S)."""

    deletion: tuple[float, ...]
    insertion: tuple[float, ...]
    deletion_auc: float
    insertion_auc: float
    mass_in_mask: float | None = None  # None: no mask (or a map without positive mass)
    pointing_hit: bool | None = None  # None: no mask


@dataclass(frozen=True)
class FaithfulnessResult:
    """Faithfulness of the shown method against ``random`` on the current image."""

    label: str  # the image
    method: str
    target_class: int
    steps: int
    curves: dict[str, CurvesResult]  # method name -> its curves ("random" among them)
    has_mask: bool = False


@dataclass(frozen=True)
class UserError:
    """An expected mistake (not an image, unknown checkpoint): a short message, nothing changes."""

    message: str
    # "image" | "checkpoint" | "settings" | "export" | "device" | "no_image" | "error"
    kind: str = "error"
    details: dict[str, Any] = field(default_factory=dict)  # e.g. the settings a checkpoint needs


@dataclass(frozen=True)
class SwinBlockInfo:
    """One block of a Swin, as the window labels and draws it."""

    stage: int  # 0-based
    index: int  # 0-based within its stage
    shifted: bool  # SW-MSA (else W-MSA)
    window: tuple[int, int]  # (wh, ww) tokens
    shift: tuple[int, int]  # (δh, δw) tokens (0 for W-MSA)
    heads: int
    token_pixels: int  # side of the input square one token stands for
    grid: tuple[int, int]  # (H_b, W_b) the stage's grid

    @property
    def label(self) -> str:
        """e.g. "1.2 SW": stage and block 1-based, W-MSA or SW-MSA."""
        return f"{self.stage + 1}.{self.index + 1} {'SW' if self.shifted else 'W'}"


@dataclass
class SwinImageResult(ImageResult):
    """An image analysed by a Swin. The ViT fields read per block: ``num_layers`` blocks,
    ``num_heads`` the most heads of a block, ``grid`` the first stage's grid (the clickable one),
    head statistics (L, num_heads) NaN where a block has fewer heads. ``thumb_grid``: the grid the
    head grid's thumbnails are drawn at, each cell ``thumb_pixels`` input pixels (the first
    stage's grid, or a coarser stage's when that one would make tiles of more cells than a
    thumbnail has pixels on screen)."""

    blocks: tuple[SwinBlockInfo, ...] = ()
    stage_grids: tuple[tuple[int, int], ...] = ()
    input_size: tuple[int, int] = (0, 0)  # (H, W) model input pixels
    window_ids: tuple[np.ndarray, ...] = ()  # per block (H_b, W_b) int32: each token's window
    ignored_params: dict[str, tuple[str, ...]] = field(default_factory=dict)  # ViT-only ones
    thumb_grid: tuple[int, int] = (0, 0)
    thumb_pixels: int = 0

    def geometry(self) -> tuple:
        return (*super().geometry(), self.blocks, self.thumb_grid)


@dataclass
class SwinMapsResult(MapsResult):
    """A Swin's maps: ``head_maps`` (L, heads, *thumb_grid) resampled (nearest) to the image's
    thumbnail grid, NaN for heads a block lacks; ``block_maps`` per block (heads, H_b, W_b) at its
    own resolution; ``query_tokens`` per block the query's token (−1: the average pool)."""

    block_maps: tuple[np.ndarray, ...] = ()
    query_tokens: tuple[int, ...] = ()
