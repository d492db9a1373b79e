"""Attention rollout, gradient rollout and relevance (DESIGN §5), by propagating one row.

Each method multiplies per-layer N × N matrices M_l; only the query's row of the product is
needed, so r ← e_q, then r ← r·M_l for l = L down to s: O(L·N²) instead of O(L·N³).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from vitviz.explain.fusion import fuse_heads
from vitviz.explain.tokens import min_max_scale, patch_part, scale_to_max, start_vector


def _check_layers(attentions: Sequence[Tensor], start_layer: int) -> None:
    if not attentions:
        raise ValueError("no attention layers were given")
    L = len(attentions)
    if not 0 <= start_layer < L:
        raise ValueError(f"start layer {start_layer} out of range for {L} layers")


def _discard(fused: Tensor, ratio: float) -> tuple[Tensor, Tensor]:
    """The matrices with their ⌊ratio·N²⌋ smallest entries zeroed: (B, N, N), and the value
    each discarded diagonal entry had (0 where the diagonal was kept): (B, N)."""
    if not 0.0 <= ratio < 1.0:
        raise ValueError(f"discard ratio must be in [0, 1) (got {ratio})")
    B, N, _ = fused.shape
    k = math.floor(ratio * N * N)
    if k == 0:
        return fused, torch.zeros(B, N, dtype=fused.dtype, device=fused.device)
    flat = fused.reshape(B, N * N).clone()
    idx = flat.topk(k, dim=1, largest=False).indices  # (B, k)
    drop = torch.zeros_like(flat, dtype=torch.bool)
    drop.scatter_(1, idx, True)
    flat[drop] = 0
    diag_dropped = torch.diagonal(drop.reshape(B, N, N), dim1=-2, dim2=-1)
    dropped = torch.where(diag_dropped, torch.diagonal(fused, dim1=-2, dim2=-1), 0)
    return flat.reshape(B, N, N), dropped


class PreparedRollout:
    """The normalised layer matrices of a rollout, ready for any query.

    Ã_l = rownorm(discard(Â_l) + I) is built once per settings (in the fused layers' own memory
    when they are handed over, ``reuse``); a query is then one vector-matrix product per layer,
    r·Ã_l (O(L·N²)): nothing else is left to compute per click.
    The query's q→q entry is protected exactly: when discard removed Â_l[q, q] = d, row q is
    Ã_l[q] + d/(S + d)·(e_q − Ã_l[q]) with S = rowsum(discard(Â_l)) + 1, so
    r·Ã_l(protected) = (r − w)·Ã_l + w, w = r·d/(S + d).
    """

    def __init__(
        self, fused: Sequence[Tensor] | Tensor, discard_ratio: float = 0.0, reuse: bool = False
    ) -> None:
        """fused: L × (B, N, N) head-fused layer matrices Â_l (non-negative), or one
        (L, B, N, N) tensor, left untouched unless ``reuse`` hands its memory over."""
        if len(fused) == 0:
            raise ValueError("no attention layers were given")
        if not isinstance(fused, Tensor):
            fused, reuse = torch.stack(list(fused)), True  # the stack is ours
        L, B, N, _ = fused.shape
        kept, dropped = _discard(fused.reshape(L * B, N, N), discard_ratio)
        ours = reuse or kept.untyped_storage().data_ptr() != fused.untyped_storage().data_ptr()
        sums = kept.sum(dim=-1) + 1  # (L·B, N) = S
        inv_sums = (1 / sums)[..., None]
        normalized = kept.mul_(inv_sums) if ours else kept * inv_sums
        normalized.diagonal(dim1=-2, dim2=-1).add_(inv_sums[..., 0])
        self.normalized = normalized.reshape(L, B, N, N)  # Ã_l
        self.restore = (dropped / (sums + dropped)).reshape(L, B, N)  # d/(S + d), 0: none
        self._restores = bool((self.restore > 0).any())
        # Batch 1: per-layer views Ã_lᵀ made once, so a query costs one tensor op per layer
        self._transposed = [m[0].T for m in self.normalized] if B == 1 else None  # L × (N, N)

    @property
    def num_layers(self) -> int:
        return self.normalized.shape[0]

    def _step(self, r: Tensor, layer: int) -> Tensor:
        """r·Ã_l for (B, N) r."""
        if self._transposed is not None:
            return torch.mv(self._transposed[layer], r[0])[None]
        return torch.bmm(r[:, None, :], self.normalized[layer])[:, 0]

    def _vector_chain(self, r: Tensor, layers: Sequence[int]) -> Tensor:
        """r·Ã_l over ``layers`` in order, batch 1, r (N,): one gemv per layer, Ã_lᵀ·r on the
        transposed view (one pass over Ã_l, the whole cost of a query)."""
        transposed = self._transposed
        for layer in layers:
            r = torch.mv(transposed[layer], r)
        return r

    def row(self, query: int | None, num_prefix: int, start_layer: int = 0) -> Tensor:
        """Row q of Ã_L ⋯ Ã_s (q→q protected): (B, N)."""
        L = self.num_layers
        if not 0 <= start_layer < L:
            raise ValueError(f"start layer {start_layer} out of range for {L} layers")
        B, N = self.normalized.shape[1], self.normalized.shape[-1]
        r = start_vector(query, N, num_prefix, B, self.normalized)  # (B, N)
        if not self._restores and query is not None:  # e_q·Ã_L is row q of Ã_L: one row read
            r = self.normalized[L - 1, :, query].clone()
            return self.chain(r, start_layer, last=L - 2)
        return self.chain(r, start_layer, protected=(r > 0).to(r.dtype))

    def chain(
        self,
        r: Tensor,
        start_layer: int = 0,
        protected: Tensor | None = None,
        last: int | None = None,
    ) -> Tensor:
        """r · Ã_last ⋯ Ã_s (last: the top layer, L − 1 by default) for start rows r (B, N),
        e.g. a pooling probe's attention; ``protected`` (B, N) marks the tokens whose own
        entry discarding never removes (a query's), None: none. (B, N)."""
        L = self.num_layers
        if not 0 <= start_layer < L:
            raise ValueError(f"start layer {start_layer} out of range for {L} layers")
        layers = range(L - 1 if last is None else last, start_layer - 1, -1)
        if not self._restores or protected is None:  # nothing discarded on a protected diagonal
            if self._transposed is not None:
                return self._vector_chain(r[0], layers)[None]
            for layer in layers:
                r = self._step(r, layer)
            return r
        for layer in layers:
            w = r * protected * self.restore[layer]
            r = self._step(r - w, layer) + w
        return r


def prepare_rollout(
    attentions: Sequence[Tensor] | Tensor,
    fusion: str = "mean",
    heads: Sequence[int] | None = None,
    discard_ratio: float = 0.0,
) -> PreparedRollout:
    """Attention rollout's layer matrices from L × (B, H, N, N) attention (or one stacked
    (L, B, H, N, N) tensor), for many queries."""
    if isinstance(attentions, Tensor):
        L, B, H, N, _ = attentions.shape
        fused = fuse_heads(attentions.reshape(L * B, H, N, N), fusion, heads)
        return PreparedRollout(fused.reshape(L, B, N, N), discard_ratio, reuse=True)
    return PreparedRollout([fuse_heads(a, fusion, heads) for a in attentions], discard_ratio)


def prepare_gradient_rollout(
    attentions: Sequence[Tensor] | Tensor,
    gradients: Sequence[Tensor] | Tensor,
    discard_ratio: float = 0.0,
) -> PreparedRollout:
    """Gradient rollout's layer matrices, Â_l = (mean_h(A_l ⊙ G_l))⁺, for many queries.

    L × (B, H, N, N) lists, or stacked (L, B, H, N, N) tensors, each gradient with its layer.
    """
    if isinstance(attentions, Tensor) and isinstance(gradients, Tensor):
        if attentions.shape != gradients.shape:
            raise ValueError(
                f"attention {tuple(attentions.shape)} vs gradient {tuple(gradients.shape)}"
            )
        fused = (attentions * gradients).mean(dim=2).clamp_min(0)
        return PreparedRollout(fused, discard_ratio, reuse=True)
    _check_pairs(attentions, gradients)
    fused = [(a * g).mean(dim=1).clamp_min(0) for a, g in zip(attentions, gradients, strict=True)]
    return PreparedRollout(fused, discard_ratio)


def rollout_map(
    prepared: PreparedRollout,
    grid: tuple[int, int],
    num_prefix: int,
    query: int | None = 0,
    start_layer: int = 0,
) -> Tensor:
    """The map R[q, patches] of a prepared rollout, scaled to max 1: (B, gh, gw)."""
    row = prepared.row(query, num_prefix, start_layer)
    return scale_to_max(patch_part(row, grid, num_prefix))


def _rollout_row(
    per_layer: Sequence[Tensor],
    query: int | None,
    num_prefix: int,
    discard_ratio: float,
    start_layer: int,
) -> Tensor:
    """Row q of Ã_L ⋯ Ã_s for fused layer matrices Â_l (B, N, N): (B, N)."""
    _check_layers(per_layer, start_layer)
    return PreparedRollout(per_layer[start_layer:], discard_ratio).row(query, num_prefix)


def rollout_row(
    attentions: Sequence[Tensor],
    query: int | None = 0,
    num_prefix: int = 1,
    fusion: str = "mean",
    heads: Sequence[int] | None = None,
    discard_ratio: float = 0.0,
    start_layer: int = 0,
) -> Tensor:
    """Attention rollout row R[q, :] over all tokens: L × (B, H, N, N) -> (B, N)."""
    fused = [fuse_heads(a, fusion, heads) for a in attentions]
    return _rollout_row(fused, query, num_prefix, discard_ratio, start_layer)


def rollout(
    attentions: Sequence[Tensor],
    grid: tuple[int, int],
    num_prefix: int,
    query: int | None = 0,
    fusion: str = "mean",
    heads: Sequence[int] | None = None,
    discard_ratio: float = 0.0,
    start_layer: int = 0,
) -> Tensor:
    """Attention rollout map R[q, patches], scaled to max 1: (B, gh, gw)."""
    row = rollout_row(attentions, query, num_prefix, fusion, heads, discard_ratio, start_layer)
    return scale_to_max(patch_part(row, grid, num_prefix))


def gradient_rollout(
    attentions: Sequence[Tensor],
    gradients: Sequence[Tensor],
    grid: tuple[int, int],
    num_prefix: int,
    query: int | None = 0,
    discard_ratio: float = 0.0,
    start_layer: int = 0,
) -> Tensor:
    """Rollout with Â_l = (mean_h(A_l ⊙ G_l))⁺, each layer with its own gradient: (B, gh, gw)."""
    _check_pairs(attentions, gradients)
    fused = [(a * g).mean(dim=1).clamp_min(0) for a, g in zip(attentions, gradients, strict=True)]
    row = _rollout_row(fused, query, num_prefix, discard_ratio, start_layer)
    return scale_to_max(patch_part(row, grid, num_prefix))


def relevance_row(
    attentions: Sequence[Tensor],
    gradients: Sequence[Tensor],
    query: int | None = 0,
    num_prefix: int = 1,
    start_layer: int = 0,
    start: Tensor | None = None,
) -> Tensor:
    """Row q of R = (I + Ā_L) ⋯ (I + Ā_s), Ā_l = mean_h((G_l ⊙ A_l)⁺): (B, N); with
    ``start`` (B, N), the row start·R instead (an attention pool's probe row)."""
    _check_pairs(attentions, gradients)
    _check_layers(attentions, start_layer)
    B, _, N, _ = attentions[-1].shape
    r = start_vector(query, N, num_prefix, B, attentions[-1]) if start is None else start
    for a, g in zip(
        reversed(attentions[start_layer:]), reversed(gradients[start_layer:]), strict=True
    ):
        a_bar = (g * a).clamp_min(0).mean(dim=1)  # (B, N, N)
        r = r + (r.unsqueeze(1) @ a_bar).squeeze(1)
    return r


def prepare_relevance(attentions: Sequence[Tensor], gradients: Sequence[Tensor]) -> Tensor:
    """Relevance's layer matrices Ā_l = mean_h((G_l ⊙ A_l)⁺), made once for many queries:
    L × (B, H, N, N) -> (L, B, N, N), on the attention's device."""
    _check_pairs(attentions, gradients)
    _check_layers(attentions, 0)
    return torch.stack(
        [(g * a).clamp_min(0).mean(dim=1) for a, g in zip(attentions, gradients, strict=True)]
    )


def prepared_relevance_map(
    a_bar: Tensor,
    grid: tuple[int, int],
    num_prefix: int,
    query: int | None = 0,
    start_layer: int = 0,
) -> Tensor:
    """The relevance map from ``prepare_relevance``'s (L, B, N, N): row q of
    (I + Ā_L) ⋯ (I + Ā_s) over the patches, min-max scaled: (B, gh, gw)."""
    L, B, N, _ = a_bar.shape
    if not 0 <= start_layer < L:
        raise ValueError(f"start layer {start_layer} out of range for {L} layers")
    r = start_vector(query, N, num_prefix, B, a_bar)  # (B, N)
    for layer in range(L - 1, start_layer - 1, -1):
        r = r + torch.bmm(r[:, None, :], a_bar[layer])[:, 0]
    return min_max_scale(patch_part(r, grid, num_prefix))


def relevance(
    attentions: Sequence[Tensor],
    gradients: Sequence[Tensor],
    grid: tuple[int, int],
    num_prefix: int,
    query: int | None = 0,
    start_layer: int = 0,
    start: Tensor | None = None,
) -> Tensor:
    """Chefer et al. 2021 relevance map R[CLS, patches], min-max scaled: (B, gh, gw); with
    ``start`` (B, N), start·R over the patches (``relevance_row``)."""
    row = relevance_row(attentions, gradients, query, num_prefix, start_layer, start)
    return min_max_scale(patch_part(row, grid, num_prefix))


def _check_pairs(attentions: Sequence[Tensor], gradients: Sequence[Tensor]) -> None:
    if len(attentions) != len(gradients):
        raise ValueError(f"{len(attentions)} attention layers but {len(gradients)} gradients")
    for i, (a, g) in enumerate(zip(attentions, gradients, strict=True)):
        if a.shape != g.shape:
            raise ValueError(f"layer {i}: attention {tuple(a.shape)} vs gradient {tuple(g.shape)}")
