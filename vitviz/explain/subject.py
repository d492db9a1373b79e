"""What a method of the method table explains: the protocol an analysis meets.

``vitviz.pipeline.analysis.Analysis`` meets it; the method table and faithfulness read an analysis
through it alone, so the explain layer never imports the analysis layer above it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from torch import Tensor, nn

from vitviz.explain.gradients import GradientProducts


class HasModel(Protocol):
    """A loaded checkpoint, as far as the methods need it."""

    @property
    def model(self) -> nn.Module: ...


class Explained(Protocol):
    """One image's forward pass with its attention captured, and the maps made from it.

    Token layout: [prefix tokens..., patches row-major over ``grid``]; L layers, H heads,
    N tokens.
    """

    input: Tensor  # (C, H, W) normalised: what the model saw
    logits: Tensor  # (classes,)
    attention: Tensor  # (L, H, N, N) post-softmax, rows = queries
    grid: tuple[int, int]  # (gh, gw)
    num_prefix_tokens: int
    kind: str  # the name of its model's kind (its kind object: ``get_kind(kind)``; DESIGN §3)

    @property
    def loaded(self) -> HasModel | None: ...

    @property
    def num_layers(self) -> int: ...

    @property
    def num_heads(self) -> int: ...

    @property
    def has_head(self) -> bool: ...

    @property
    def top_class(self) -> int: ...

    def query_token(self, patch: tuple[int, int] | None = None) -> int | None: ...

    def attention_maps(self, layer: int, patch: tuple[int, int] | None = None) -> Tensor: ...

    def rollout(
        self,
        patch: tuple[int, int] | None = None,
        fusion: str = "mean",
        heads: Sequence[int] | None = None,
        discard_ratio: float = 0.0,
        start_layer: int = 0,
    ) -> Tensor: ...

    def gradient_rollout(
        self,
        target_class: int | None = None,
        patch: tuple[int, int] | None = None,
        discard_ratio: float = 0.0,
        start_layer: int = 0,
    ) -> Tensor: ...

    def relevance(
        self,
        target_class: int | None = None,
        patch: tuple[int, int] | None = None,
        start_layer: int = 0,
    ) -> Tensor: ...

    def dino_masks(
        self, layer: int = -1, threshold: float = 0.6, patch: tuple[int, int] | None = None
    ) -> Tensor: ...

    def gradient_products(self, target_class: int | None = None) -> GradientProducts: ...
