"""Layers assembled from attention computed one head (and one image) at a time, during a pass.

A ``HeadPlan`` says where each one-head (B, 1, N, N) softmax goes (record index -> layer, head);
a ``MatrixPlan`` says how the (N, N) softmaxes of attention computed one image and one head at
a time follow each other (each layer's B·H of them in a row, image by image or head by head).
``Assembly`` writes each piece into its layer's (B, H, N, N) tensor, which is what the capture
records, and hands the model back the piece's own values plus that tensor's slice minus itself
(exactly zero in value): ∂y/∂A of the layer tensor is then the gradient at each piece.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from vitviz.modelcode.errors import ModelCodeError

ONE_HEAD = "softmax, one head at a time"
ONE_MATRIX = "softmax, one image and one head at a time"


@dataclass(frozen=True)
class HeadPlan:
    """Where each one-head softmax goes: record index (raw order) -> (layer, head, heads)."""

    spots: dict[int, tuple[int, int, int]]
    lists: tuple[str, ...] = ()  # the ModuleLists whose elements are the heads (numbered by index)

    def layer_heads(self) -> dict[int, int]:
        """layer -> its head count."""
        return {layer: heads for layer, _, heads in self.spots.values()}


@dataclass(frozen=True)
class MatrixPlan:
    """(N, N) softmaxes over ``tokens`` tokens, ``heads`` per image per layer, each layer's in
    a row: image by image (``by_image``: for each image, for each head) or head by head."""

    heads: int
    tokens: int
    by_image: bool = True

    def place(self, k: int, batch: int) -> tuple[int, int, int]:
        """(layer, image, head) of the k-th (N, N) softmax of a pass over ``batch`` images."""
        layer, within = divmod(k, batch * self.heads)
        if self.by_image:
            image, head = divmod(within, self.heads)
        else:
            head, image = divmod(within, batch)
        return layer, image, head


@dataclass
class Assembly:
    """The layer tensors of one pass; ``add`` records a new one (in the capture's log)."""

    add: Callable[[Tensor, str], None]
    heads: HeadPlan | None = None
    matrices: MatrixPlan | None = None
    layers: dict[tuple[str, int], Tensor] = field(default_factory=dict)
    filled: dict[tuple[str, int], int] = field(default_factory=dict)
    matrix_count: int = 0

    def one_head(self, index: int, p: Tensor) -> Tensor | None:
        """The model's (B, 1, N, N) ``p`` (record ``index``) written into its layer; None when
        the plan has no place for it."""
        spot = self.heads.spots.get(index) if self.heads is not None else None
        if spot is None:
            return None
        layer, head, heads = spot
        if p.shape[1] != 1:
            raise ModelCodeError(
                f"attention record {index} was a one-head softmax when the model was opened "
                f"and now has {p.shape[1]} heads: the forward pass changed"
            )
        B, _, N, M = p.shape
        A = self._layer(("head", layer), (B, heads, N, M), p, ONE_HEAD)
        return _on_path(A, (slice(None), slice(head, head + 1)), p)

    def matrix(self, p: Tensor, batch: int) -> Tensor | None:
        """The model's (N, N) ``p`` written into its layer (image, head); None when the plan
        does not take (N, N) softmaxes of this size."""
        plan = self.matrices
        if plan is None or p.shape[-1] != plan.tokens:
            return None
        layer, image, head = plan.place(self.matrix_count, batch)
        self.matrix_count += 1
        N = p.shape[-1]
        A = self._layer(("matrix", layer), (batch, plan.heads, N, N), p, ONE_MATRIX)
        return _on_path(A, (image, head), p)

    def _layer(self, key: tuple[str, int], shape: tuple, p: Tensor, source: str) -> Tensor:
        A = self.layers.get(key)
        if A is None:
            A = torch.zeros(shape, dtype=p.dtype, device=p.device)
            if torch.is_grad_enabled() and p.requires_grad:
                A.requires_grad_(True)  # a leaf: ∂y/∂A is asked for by name
            self.layers[key] = A
            self.add(A, source)
        self.filled[key] = self.filled.get(key, 0) + 1
        return A

    def check(self, batch: int) -> None:
        """ModelCodeError unless every layer got each of its pieces once."""
        if self.heads is not None:
            for layer, heads in self.heads.layer_heads().items():
                got = self.filled.get(("head", layer), 0)
                if got != heads:
                    raise ModelCodeError(
                        f"layer {layer} got {got} of its {heads} one-head softmaxes in this "
                        "forward pass: it no longer runs as when it was opened"
                    )
        if self.matrices is not None:
            each = batch * self.matrices.heads
            if self.matrix_count == 0 or self.matrix_count % each:
                raise ModelCodeError(
                    f"{self.matrix_count} (N, N) softmaxes in this forward pass, not a multiple "
                    f"of {batch} image(s) × {self.matrices.heads} heads: it no longer runs as "
                    "when it was opened"
                )


def _on_path(A: Tensor, where: tuple, p: Tensor) -> Tensor:
    """Write ``p`` into ``A[where]``; what the model goes on with: ``p`` in value, on A's path."""
    with torch.no_grad():
        A[where].copy_(p)
    if not A.requires_grad:
        return p
    part = A[where]
    return p + (part - part.detach())
