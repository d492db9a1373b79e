"""What a model must offer for vitviz to explain it (DESIGN §4): one ``typing.Protocol``.

vitviz's own ``VisionTransformer`` and ``vitviz.modelcode``'s ``CapturedModel`` (a user's module
with its attention captured) both satisfy it; the analysis and the methods ask nothing more.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from torch import Tensor

from vitviz.blocks.vit import ViTOutput


@runtime_checkable
class ModelConfig(Protocol):
    """The model's shape: the numbers the analysis, the grid and the window read."""

    patch_size: int
    num_classes: int  # 0: no classification head
    depth: int  # layers with attention
    heads: int
    num_prefix_tokens: int  # tokens before the patches: CLS, distillation, registers
    image_size: tuple[int, int]


@runtime_checkable
class ExplainableModel(Protocol):
    """A ViT vitviz can explain: its config, its prefix tokens and a forward pass that hands
    back the attention of every layer (L × (B, H, N, N)) with the logits (B, C)."""

    config: ModelConfig

    @property
    def num_prefix_tokens(self) -> int: ...

    def forward_explained(
        self, x: Tensor, capture_attention: bool = True, hidden_states: bool = False
    ) -> ViTOutput: ...
