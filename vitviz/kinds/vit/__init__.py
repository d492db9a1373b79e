"""The Vision Transformer kind: one grid of patch tokens after prefix tokens (CLS, registers).

Holds vitviz's own ``VisionTransformer`` and any module from a user's code whose attention
``vitviz.modelcode`` captures. Its members are the token-layout base's
(``vitviz.kinds.token_layout``); this adds its identity, families, loading and training.
``KIND`` is what ``vitviz.kinds`` registers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from vitviz.kindapi.sides import TrainingSide
from vitviz.kinds.token_layout import TokenLayoutKind
from vitviz.kinds.vit import training

if TYPE_CHECKING:  # torch-free at import; the ViT's analysis sits above the registry
    from torch import Tensor, nn

    from vitviz.blocks import ViTConfig


class ViTKind(TokenLayoutKind):
    """A ViT: every layer attends over [prefix tokens..., patches row-major over the grid]."""

    name = "vit"
    label = "Vision Transformer"
    catch_all = True  # tried last: its generic layouts and any captured model of a user's code
    OWNER = "a ViT"

    def owns(self, model: nn.Module) -> bool:
        from vitviz.blocks.protocol import ExplainableModel

        return isinstance(model, ExplainableModel)

    def parts(self, model: nn.Module) -> tuple[str, ...]:
        from vitviz.blocks import VisionTransformer

        if isinstance(model, VisionTransformer):
            return super().parts(model)
        return ("the attention your code computes (captured)",)

    @property
    def families(self) -> Sequence[Any]:
        from vitviz.kinds.vit.families import FAMILIES

        return FAMILIES

    def config_from_dict(self, data: dict[str, object]) -> ViTConfig:
        from vitviz.blocks import ViTConfig

        return ViTConfig.from_dict(data)

    def build_from_state(self, config: ViTConfig, state: Mapping[str, Tensor]) -> nn.Module:
        from vitviz.checkpoints.native import build_model

        return build_model(config, state)

    @property
    def training(self) -> TrainingSide:
        return training.SIDE


KIND = ViTKind()
