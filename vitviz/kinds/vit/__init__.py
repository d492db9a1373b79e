"""The Vision Transformer kind: one grid of patch tokens after prefix tokens (CLS, registers).

Holds vitviz's own ``VisionTransformer`` and any module from a user's code whose attention
``vitviz.modelcode`` captures. ``KIND`` is what ``vitviz.kinds`` registers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from vitviz.kinds.protocol import LayerGrid, LayerRow, MethodImplementation, TokenGeometry
from vitviz.kinds.sides import TrainingSide
from vitviz.kinds.vit import training

if TYPE_CHECKING:  # torch-free at import: the registry is read before torch loads
    from torch import Tensor, nn

    from vitviz.model import ViTConfig


class ViTKind:
    """A ViT: every layer attends over [prefix tokens..., patches row-major over the grid]."""

    name = "vit"
    label = "Vision Transformer"

    def owns(self, model: nn.Module) -> bool:
        from vitviz.model.protocol import ExplainableModel

        return isinstance(model, ExplainableModel)

    @property
    def families(self) -> Sequence[Any]:
        return ()  # the generic layouts of vitviz.checkpoints.families

    # -- loading, model code and training (helper "loading") ---------------------------------
    def config_from_dict(self, data: dict[str, object]) -> ViTConfig:
        from vitviz.model import ViTConfig

        return ViTConfig.from_dict(data)

    def build_from_state(self, config: ViTConfig, state: Mapping[str, Tensor]) -> nn.Module:
        from vitviz.checkpoints.native import build_model

        return build_model(config, state)

    def library_outputs(self, model: nn.Module, x: Tensor) -> tuple[Tensor, Sequence[Tensor]]:
        out = model.forward_explained(x, capture_attention=True)
        return out.logits, out.attentions

    @property
    def model_code(self) -> None:
        return None  # vitviz.modelcode's generic capture opens a ViT from a user's file

    @property
    def training(self) -> TrainingSide:
        return training.SIDE

    def analyze(self, loaded: Any, image: Any, **options: Any) -> Any:
        from vitviz.analysis import analyze

        return analyze(loaded, image, **options)

    def token_geometry(self, analysis: Any) -> TokenGeometry:
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

    def implementation(self, method: str) -> MethodImplementation | None:
        return None  # the method table's own compute functions are the ViT's (for now)

    def layer_rows(self, analysis: Any) -> tuple[LayerRow, ...]:
        layers = getattr(analysis, "layer_indices", None) or range(analysis.num_layers)
        return tuple(LayerRow(str(i), int(analysis.num_heads)) for i in layers)


KIND = ViTKind()
