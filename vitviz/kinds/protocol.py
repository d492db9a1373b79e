"""What the rest of vitviz asks of a model kind (a ViT, a Swin, ...): one ``typing.Protocol``.

A kind is one package under ``vitviz/kinds/`` whose ``KIND`` object meets ``ModelKind``. The shared
layers (analysis façade, method table, faithfulness, statistics, export, batches, the CLI, the
engine and the window) call these members and never test which kind they hold.

Sections of the protocol:
- identity: ``name``, ``label``, ``owns``;
- loading: ``families`` (checkpoint families, detected from keys), ``config_from_dict`` and
  ``build_from_state`` (a native file's model, a conversion's), ``library_outputs`` (what the
  library check compares);
- model code: ``model_code`` (a user's module it recognises, wrapped; its settings);
- analysis: ``analyze`` (one forward pass with capture into one analysis object);
- token geometry: ``token_geometry`` (grids, prefix tokens, token <-> image region, windows);
- methods: ``implementation`` (its version of a method of the method table, by the method's name);
- window: ``layer_rows`` (head-grid row labels); a layer's window partition, drawn over the big
  map, is in its ``LayerGrid.windows``;
- training: ``training`` (its settings, presets, checks, network and probe maps; see
  ``vitviz.kinds.sides``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from vitviz.kinds.sides import ModelCodeSide, ModelConfig, TrainingSide

if TYPE_CHECKING:  # torch-free at run time: the Training tab reads the kinds before torch loads
    import numpy as np
    from torch import Tensor, nn


@dataclass(frozen=True)
class LayerGrid:
    """One attention layer's tokens as the image sees them.

    ``grid`` (h, w) tokens laid row-major after ``num_prefix_tokens`` prefix tokens; each token
    stands for a ``token_pixels`` × ``token_pixels`` square of the model input (top-left at
    (row · token_pixels, col · token_pixels)). ``windows``: (h, w) int32 window id per token where
    the layer attends within windows (a Swin's W-MSA/SW-MSA), None where every token sees every
    other (a ViT).
    """

    grid: tuple[int, int]
    token_pixels: int
    num_prefix_tokens: int = 0
    windows: np.ndarray | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class TokenGeometry:
    """Where each layer's tokens sit on the model input: the one object the hover, the query
    click, the thumbnails, faithfulness's patch order and the overlays read.

    ``grid`` (gh, gw) is the clickable grid, of ``cell_pixels``-pixel cells over the model input
    of ``input_size`` (H, W): a ViT's patch grid, a Swin's first stage. ``layers`` has one
    ``LayerGrid`` per attention layer (a Swin block each). Maps of the method table are (gh, gw).
    """

    input_size: tuple[int, int]
    grid: tuple[int, int]
    cell_pixels: int
    layers: tuple[LayerGrid, ...]

    @property
    def num_prefix_tokens(self) -> int:
        return self.layers[0].num_prefix_tokens if self.layers else 0

    def cell_at(self, y: float, x: float) -> tuple[int, int] | None:
        """The clickable cell (row, col) under input pixel (y, x), None outside the grid."""
        r, c = int(y // self.cell_pixels), int(x // self.cell_pixels)
        if 0 <= r < self.grid[0] and 0 <= c < self.grid[1] and y >= 0 and x >= 0:
            return r, c
        return None

    def cell_region(self, cell: tuple[int, int]) -> tuple[int, int, int, int]:
        """(top, left, bottom, right) input pixels of a clickable cell."""
        p = self.cell_pixels
        return cell[0] * p, cell[1] * p, (cell[0] + 1) * p, (cell[1] + 1) * p

    def token_at(self, layer: int, y: float, x: float) -> int:
        """Index (prefix tokens included) of the token of ``layer`` covering input pixel (y, x),
        clamped to the layer's grid."""
        g = self.layers[layer]
        r = min(max(int(y // g.token_pixels), 0), g.grid[0] - 1)
        c = min(max(int(x // g.token_pixels), 0), g.grid[1] - 1)
        return g.num_prefix_tokens + r * g.grid[1] + c


@dataclass(frozen=True)
class LayerRow:
    """One row of the window's head grid: an attention layer as the user reads it.

    ``label``: e.g. "3" for a ViT's layer 3, "2.2 SW" for a Swin's stage 2 block 2 (shifted);
    ``heads``: its heads (rows of a kind with fewer heads in some layers are padded with NaN).
    """

    label: str
    heads: int
    tooltip: str = ""


@runtime_checkable
class KindAnalysis(Protocol):
    """One image's forward pass in a model of some kind, with what its methods need.

    ``input`` (C, H, W) normalised model input; ``pixels`` (H, W, 3) uint8 of it; ``logits`` and
    ``probs`` (classes,) float32 (empty without a head); ``kind`` the name of its kind.
    """

    kind: str
    input: Tensor
    logits: Tensor
    probs: Tensor

    @property
    def top_class(self) -> int: ...


class MethodImplementation(Protocol):
    """A kind's version of a method of the method table: (analysis, query cell or None,
    target class or None, the parameters it takes) -> (gh, gw) map over the clickable grid."""

    def __call__(
        self,
        analysis: Any,
        query: tuple[int, int] | None,
        target_class: int | None,
        params: Mapping[str, Any],
    ) -> Tensor: ...


@runtime_checkable
class ModelKind(Protocol):
    """A kind of network vitviz explains. Its package registers one object meeting this."""

    name: str  # "vit", "swin": a model's ``model_kind``, the npz's ``kind``
    label: str  # "Vision Transformer", "Swin Transformer": what the window and the CLI say

    def owns(self, model: nn.Module) -> bool:
        """``model`` is of this kind (read only when the model has no ``model_kind`` naming a
        registered kind)."""
        ...

    # -- loading ------------------------------------------------------------------------------
    @property
    def families(self) -> Sequence[Any]:
        """Its checkpoint families (``vitviz.checkpoints.families.base.Family``), tried before
        the ViT's generic layouts."""
        ...

    # -- loading, model code and training (helper "loading") -----------------------------------
    def config_from_dict(self, data: dict[str, object]) -> ModelConfig:
        """Its model config from ``ModelConfig.to_dict`` (a native file's ``config``);
        ValueError / TypeError / KeyError for a damaged one."""
        ...

    def build_from_state(self, config: ModelConfig, state: Mapping[str, Tensor]) -> nn.Module:
        """Its network of ``config`` in eval mode holding exactly ``state`` (no second copy);
        CheckpointError naming the keys or shapes that don't fit."""
        ...

    def library_outputs(
        self, model: nn.Module, x: Tensor
    ) -> tuple[Tensor, Sequence[Tensor] | None]:
        """``model``'s logits (B, classes) of x (B, C, H, W) and the attention maps (L × (B, heads,
        N, N)) comparable with the library model it claims to be; None: its maps aren't the
        library's (a Swin's windows), only the logits are compared."""
        ...

    @property
    def model_code(self) -> ModelCodeSide | None:
        """How it opens a module from a user's file it recognises; None: it has no own way (the
        ViT's is vitviz.modelcode's generic capture)."""
        ...

    @property
    def training(self) -> TrainingSide | None:
        """Its training presets, settings, checks and network; None: vitviz can't train one."""
        ...

    # -- analysis -----------------------------------------------------------------------------
    def analyze(self, loaded: Any, image: Any, **options: Any) -> KindAnalysis:
        """One forward pass of ``loaded``'s model on ``image`` with its attention captured."""
        ...

    def token_geometry(self, analysis: Any) -> TokenGeometry:
        """Where ``analysis``'s tokens sit on the model input, layer by layer."""
        ...

    # -- methods ------------------------------------------------------------------------------
    def implementation(self, method: str) -> MethodImplementation | None:
        """Its version of the method of the table called ``method``; None: it has none."""
        ...

    # -- window -------------------------------------------------------------------------------
    def layer_rows(self, analysis: Any) -> tuple[LayerRow, ...]:
        """The head grid's rows, one per attention layer."""
        ...
