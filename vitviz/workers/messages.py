"""What crosses between the window and the engine thread: plain data, numpy only.

One ``ImageResult`` and one ``MapsResult`` for every model kind: a kind's layers, token grids and
words come as ``LayerRow``, ``TokenGeometry`` and ``ViewWords`` (vitviz.kindapi.protocol, which
imports no torch), so the window never asks which kind it shows."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vitviz.kindapi.protocol import LayerGrid, LayerRow, TokenGeometry, ViewWords

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
    nearest: tuple[str, ...] = ()  # the methods closest to it, closest first
    needs_head: bool = False  # it explains a class (the map's title names it)


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
    headline: str = ""  # its shape in the status line ("12 layers × 12 heads")
    architecture: tuple[str, ...] = ()  # the model dialog's lines about its shape
    takes_prompts: bool = False  # its classes are prompts the user types (the prompt box)
    prompts: tuple[str, ...] = ()  # the prompts it scores now (none: no head yet)
    assumed: dict[str, Any] = field(default_factory=dict)  # settings not from file nor user
    arch: str = ""  # the architecture beside its name (its folder's, else its kind's label)


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
    # the model's layers and tokens as the window draws them (one row per attention layer)
    layer_rows: tuple[LayerRow, ...] = ()
    token_geometry: TokenGeometry | None = None  # each layer's grid, token size and windows
    words: ViewWords = field(default_factory=ViewWords)
    ignored_params: dict[str, dict[str, str]] = field(default_factory=dict)  # kind ignores
    thumb_grid: tuple[int, int] = (0, 0)  # the head grid's thumbnails: (0, 0) the grid
    thumb_pixels: int = 0  # input pixels per thumbnail cell
    cam_blocks: int | None = None  # blocks the CAM layer picker offers (None: num_layers)
    cam_auto: str = ""  # the layer a CAM's ``auto`` reads, ``B.part`` ("": the picker's words)
    cam_post_norm: tuple[int, ...] = ()  # blocks whose norm1 follows their attention (DESIGN §5)
    # the heads (layer, head) knocked out of the model it was analysed with, and their ablation
    knocked_out: tuple[tuple[int, int], ...] = ()
    ablation: str = "zero"

    def __post_init__(self) -> None:
        if self.cam_blocks is None:
            self.cam_blocks = self.num_layers
        if self.thumb_grid == (0, 0):
            self.thumb_grid, self.thumb_pixels = tuple(self.grid), self.patch_size
        if not self.layer_rows:  # a plain stack of layers
            L = self.num_layers
            self.layer_rows = tuple(
                LayerRow(
                    f"L{i}",
                    self.num_heads,
                    title=f"layer {i} of 0–{L - 1}",
                    hover=f"layer {i}",
                )
                for i in range(L)
            )
        if self.token_geometry is None:  # every layer on the grid
            grid = tuple(self.grid)
            layer = LayerGrid(grid, self.patch_size, self.num_prefix_tokens)
            size = tuple(int(v) for v in self.input_pixels.shape[:2])
            self.token_geometry = TokenGeometry(
                size, grid, self.patch_size, (layer,) * self.num_layers
            )

    def geometry(self) -> tuple:
        """What the window's geometry-bound state (query, hover, thumbnails, selection) depends
        on: equal for two images of one model, different after most model changes."""
        return (
            self.grid,
            self.patch_size,
            self.input_pixels.shape[:2],
            self.num_prefix_tokens,
            self.num_layers,
            self.num_heads,
            tuple((r.label, r.heads) for r in self.layer_rows),
            self.thumb_grid,
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
    # per layer (heads, h_l, w_l) at the layer's own grid (the big map); () : the head maps
    layer_maps: tuple[np.ndarray, ...] = ()
    query_tokens: tuple[int, ...] = ()  # per layer the query's token in its grid (−1: none)

    def layer_map(self, layer: int, head: int) -> np.ndarray:
        """The big map of attention: ``layer``'s ``head`` (−1: the mean of its heads) at the
        layer's own grid."""
        if not self.layer_maps:
            return self.mean_maps[layer] if head == -1 else self.head_maps[layer, head]
        rows = self.layer_maps[layer]
        if head != -1:
            return rows[min(head, len(rows) - 1)]
        if rows.shape[-2:] == self.mean_maps.shape[-2:]:
            return self.mean_maps[layer]  # the same mean, computed once
        return rows.mean(axis=0)


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
class FeaturesResult:
    """What the tokens carry on the current image (the Features view, DESIGN §5): ``pca``
    (h, w, 3) colours of the final tokens (None: the kind refuses PCA, why in ``pca_note``);
    ``similarity`` (h, w) cosine with the query's token and ``norms`` (h, w) with ``high``
    (h, w) bool, both of block ``layer`` of ``blocks``; ``prefix_norms`` (P,) the CLS's and
    registers' norms there; ``logit_lens`` (L, classes) (None: no head or no readout) over
    ``class_names``."""

    layer: int  # the block shown, counted from 0
    blocks: int
    query: tuple[int, int] | None
    pca: np.ndarray | None
    similarity: np.ndarray
    norms: np.ndarray
    high: np.ndarray
    prefix_norms: np.ndarray
    logit_lens: np.ndarray | None
    class_names: list[str]
    note: str = ""  # why a part is missing (a model without a readout)
    asked_layer: int = -1  # the block as asked (−1: the last)
    # every clicked patch's similarity at once, for a click the window answers itself:
    # ``table`` (T, h, w) and ``cells`` (gh, gw) int32, each clickable cell's row (None: too big)
    table: np.ndarray | None = None
    cells: np.ndarray | None = None
    pca_note: str = ""  # why ``pca`` is None (the kind refuses PCA)


@dataclass(frozen=True)
class CompareResult:
    """Two models on the current image (File ▸ Compare with…, DESIGN §5): each one's map of
    ``method`` for ``query`` (``map_a``, ``map_b``: (h, w), None with its reason in ``errors``
    and the first of them in ``error``), its name and
    top predictions [(class, probability)], ``head_similarity`` (L, H) or (L, 1), the
    methods model B can't run on this image with its reasons (``refused_b``), the image's
    label and the heads knocked out of model A (the viewer's model) when any are; model B's
    words (``words_b``) and token geometry (``geometry_b``), to say its query in its words.
    ``query`` is a cell of A's grid; ``query_b`` B's cell at the same place of the image (its
    grid may be another), the cell B's map is made for."""

    method: str
    query: tuple[int, int] | None
    name_a: str
    name_b: str
    map_a: np.ndarray | None
    map_b: np.ndarray | None
    top_a: list[tuple[str, float]]
    top_b: list[tuple[str, float]]
    head_similarity: np.ndarray
    error: str = ""
    refused_b: dict[str, str] = field(default_factory=dict)  # {method: why B can't run it}
    errors: tuple[str, str] = ("", "")  # why map_a, map_b is None ("" where it is not)
    image_label: str = ""  # the image both maps are of
    knocked_a: tuple[tuple[int, int], ...] = ()  # heads knocked out of model A (layer, head)
    ablation_a: str = "zero"  # how they were
    words_b: ViewWords = field(default_factory=ViewWords)  # as B's kind words its views
    geometry_b: TokenGeometry | None = None  # B's clickable grid (its query cell's)
    query_b: tuple[int, int] | None = None  # B's cell at the place of ``query``
