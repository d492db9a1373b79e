"""An analysis's head statistics, given or made from its kept attention when first read.

The (K, H) statistics of each kept layer and head (mean attention distance, entropy, prefix
share: ``vitviz.explain.stats``) cost a log per attention entry. An analysis that keeps its
attention in float32 holds exactly what the forward pass computed, so the statistics are made
from it the first time they are read, with the same calls on the same (1, H, N, N) layers as in
the capture, and kept: the same numbers, paid only by what shows them. An analysis that keeps
a half type has them taken in the capture, from the float32 layer (``HeadStats.given``).
"""

from __future__ import annotations

import threading

import torch
from torch import Tensor

from vitviz import explain
from vitviz.explain.stats import patch_distances

STATISTICS = ("mean_distance", "entropy", "prefix_share")  # the rows of ``HeadStats.values``


def layer_statistics(
    attn: Tensor, grid: tuple[int, int], num_prefix: int, patch_size: int, distances: Tensor
) -> Tensor:
    """One layer's statistics for a batch: attn (B, H, N, N) float32 -> (3, B, H): mean
    attention distance (pixels of the model input), entropy (nats), prefix share.
    ``distances``: ``patch_distances`` of the grid, (P, P) on attn's device."""
    return torch.stack(
        [
            explain.mean_attention_distance(attn, grid, num_prefix, patch_size, distances),
            explain.attention_entropy(attn, num_prefix),
            explain.prefix_share(attn, num_prefix),
        ]
    )


class LayerStatistics:
    """``layer_statistics`` of one grid, layer after layer: attn (B, H, N, N) float32 ->
    (3, B, H); the grid's ``patch_distances`` made at the first layer, on its device, and
    kept for the others."""

    def __init__(self, grid: tuple[int, int], num_prefix: int, patch_size: int) -> None:
        self.grid, self.prefix, self.patch = grid, num_prefix, patch_size
        self.distances: Tensor | None = None  # (P, P)

    def __call__(self, attn: Tensor) -> Tensor:
        if self.distances is None:
            self.distances = patch_distances(self.grid, self.patch, attn[:0])
        return layer_statistics(attn, self.grid, self.prefix, self.patch, self.distances)


class HeadStats:
    """(3, K, H) float32 on the host, rows as ``STATISTICS``: given, or made from a kept
    (K, H, N, N) float32 attention on the first read of ``values`` (one transfer), then kept.
    Shared by analyses copied from one another (they hold the same attention)."""

    def __init__(
        self,
        values: Tensor | None = None,
        attention: Tensor | None = None,
        grid: tuple[int, int] = (0, 0),
        num_prefix: int = 0,
        patch_size: int = 1,
    ) -> None:
        if values is None and (attention is None or attention.dtype != torch.float32):
            raise ValueError("head statistics are made from a kept float32 attention only")
        self._values = values
        self._attention = attention if values is None else None
        self._grid, self._prefix, self._patch = grid, num_prefix, patch_size
        self._lock = threading.Lock()  # a worker thread and the caller may read it at once

    @classmethod
    def given(cls, values: Tensor) -> HeadStats:
        """Statistics already made: (3, K, H) on the host."""
        return cls(values=values)

    @property
    def made(self) -> bool:
        """Whether the values exist (given, or read once)."""
        return self._values is not None

    @property
    def values(self) -> Tensor:
        """(3, K, H) float32 on the host; made from the attention on the first read."""
        if self._values is None:
            with self._lock:
                if self._values is None:
                    self._values = self._make()
                    self._attention = None  # the analysis holds it; this needs it no more
        return self._values

    def _make(self) -> Tensor:
        """The capture's calls on each kept layer (1, H, N, N), on the attention's device."""
        attention = self._attention
        assert attention is not None
        with torch.inference_mode():
            of_layer = LayerStatistics(self._grid, self._prefix, self._patch)
            per_layer = [of_layer(a[None])[:, 0] for a in attention]  # K × (3, H)
            if not per_layer:
                return torch.empty((3, 0, attention.shape[1]))
            return torch.stack(per_layer, dim=1).cpu()  # one transfer

    def replaced(self, row: int, value: Tensor) -> HeadStats:
        """New statistics with row ``row`` (``STATISTICS``) set to ``value`` (K, H) (a kind's
        own numbers, e.g. a CaiT's class-attention layers); this object is left as it is."""
        values = self.values.clone()
        values[row] = value
        return HeadStats.given(values)
