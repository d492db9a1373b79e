"""One forward pass's inside, as every kind answers it: the accessor new capabilities are written
on (interventions, feature views, model compare, the CAM family's target layers; DESIGN §3).

Imports no torch at run time (the types are named for checkers only).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from vitviz.kindapi.grids import LayerGrid

if TYPE_CHECKING:
    from torch import Tensor


@dataclass(frozen=True)
class OnRows:
    """A head replaced in some rows of the batch only, every other row keeping what it computes
    (single-head passes of several layers in one batch, DESIGN §5): ``rows`` (R,) long, the
    batch rows, each once; ``value`` (R, N_l, head_dim) their replacements in that order, laid
    out as ``Intermediates.heads[layer][:, head]``; None zeroes them."""

    rows: Tensor
    value: Tensor | None = None

    def put(self, heads: Tensor, index: int, what: str) -> None:
        """Write the replacement into ``heads`` (B, H, N, hd) at head ``index``, in place;
        ValueError (a clause naming ``what``) for rows or a value that do not fit."""
        B, _, N, hd = heads.shape
        R = int(self.rows.shape[0]) if self.rows.ndim == 1 else -1
        needed = f"{what}: rows (R,) of a batch of {B} are needed"
        if R < 0:
            raise ValueError(needed)
        # rows on a device are checked there too (one sync: an index out of range would break
        # the device's context, not raise); rows kept on the host cost none
        outside = (self.rows < 0) | (self.rows >= B)
        if R and bool(outside.any()):
            row = int(self.rows[outside][0])
            raise ValueError(f"{needed} (row {row} is outside 0..{B - 1})")
        rows = self.rows.to(heads.device)
        if self.value is None:
            heads[rows, index] = 0.0
            return
        if tuple(self.value.shape) != (R, N, hd):
            raise ValueError(
                f"{what}: a tensor (R, N, head_dim) = {(R, N, hd)} is needed for its rows, got "
                f"{tuple(self.value.shape)}"
            )
        heads[rows, index] = self.value.to(device=heads.device, dtype=heads.dtype)


# (attention layer, head) -> what its output before the output projection becomes: None zeroes
# it, a tensor (B, N_l, head_dim) laid out as ``Intermediates.heads[layer][:, head]`` replaces it,
# ``OnRows`` replaces it in some rows of the batch only.
HeadReplacement = Mapping[tuple[int, int], "Tensor | OnRows | None"]


@dataclass(frozen=True)
class Intermediates:
    """What one forward pass of a batch computed inside, block by block and head by head.

    ``logits`` (B, classes) (B, 0 without a head) of the pass, replacements applied.
    ``blocks``: one per block, its output tokens on its own grid, (B, C, h, w) (NCHW, as timm's
    ``forward_intermediates`` gives them); ``block_prefix`` the same blocks' prefix tokens
    (B, P, C) (P = 0 for a kind without CLS or registers); ``block_grids`` each block's
    ``LayerGrid``.
    ``heads``: one per attention layer (the head grid's rows, ``ModelKind.layer_rows``), each
    head's output before the output projection, (B, heads, N_l, head_dim): the prefix tokens first,
    then the layer's grid row-major (a window-attention layer's windows put back on the image
    grid, shifts undone). ``head_grids`` each attention layer's ``LayerGrid``.
    ``projections``: each attention layer's output projection, the module whose input the heads
    are read from (its input's last axis is the heads concatenated, head by head, in whatever
    token order the module has): interventions that must hold over passes the accessor does not
    run (an analysis's) hook it there (DESIGN §3). ``block_modules``: the modules whose outputs
    ``blocks`` are, in order; ``mlps`` each block's MLP branch (``mlp_branch``), the module
    whose output the block's residual adds as its MLP branch (up to LayerScale and drop path),
    None for a block without one. ``attention_branches`` each attention layer's modules whose
    outputs the block's residual adds as its attention branch (up to LayerScale and drop path):
    its projections (``attention_branch``), or the norm after them in a residual post-norm
    block; zeroing each zeroes the branch. ``head_projections`` each attention layer's
    projections that read its heads, the heads split evenly among them, branch after branch
    (one but in a block of several attention branches; empty: ``projections`` alone).
    A pass asked for its logits alone (``logits_only``) keeps no block's or head's output:
    ``blocks``, ``block_prefix``, ``block_grids``, ``heads`` and ``head_grids`` are empty, the
    modules (``projections``, ``block_modules``, ``mlps``) named as ever.
    """

    logits: Tensor
    blocks: tuple[Tensor, ...]
    block_prefix: tuple[Tensor, ...]
    block_grids: tuple[LayerGrid, ...]
    heads: tuple[Tensor, ...]
    head_grids: tuple[LayerGrid, ...]
    replaced: tuple[tuple[int, int], ...] = field(default=())
    projections: tuple[Any, ...] = field(default=())
    block_modules: tuple[Any, ...] = field(default=())
    mlps: tuple[Any, ...] = field(default=())
    attention_branches: tuple[tuple[Any, ...], ...] = field(default=())
    head_projections: tuple[tuple[Any, ...], ...] = field(default=())


def mlp_branch(block: Any) -> Any:
    """The module whose output ``block``'s residual adds as its MLP branch: the block's own
    ``mlp_branch`` where it names one (a residual post-norm block's norm after the MLP, a
    parallel block's MLP output projection), else its ``mlp``; None without either."""
    named = getattr(block, "mlp_branch", None)
    return named if named is not None else getattr(block, "mlp", None)


def attention_branch(block: Any, projections: tuple[Any, ...]) -> tuple[Any, ...]:
    """The modules whose outputs ``block``'s residual adds as its attention branch: the block's
    own ``attention_branch`` where it names one (a residual post-norm block's norm after the
    attention), else its attention layer's ``projections`` (several in a block of branches)."""
    named = getattr(block, "attention_branch", None)
    return (named,) if named is not None else tuple(projections)


@dataclass(frozen=True)
class BlockOutputs:
    """The block part of ``Intermediates`` (``logits``, ``blocks``, ``block_prefix``,
    ``block_grids``, laid out as there) that an analysis's own forward pass already kept: the
    feature views read it instead of running the accessor's pass again (DESIGN §5)."""

    logits: Tensor
    blocks: tuple[Tensor, ...]
    block_prefix: tuple[Tensor, ...]
    block_grids: tuple[LayerGrid, ...]


@dataclass(frozen=True)
class Readout:
    """What a kind's network does after its blocks, applied to any block's tokens (the feature
    views' final norm and the logit lens, DESIGN §5).

    ``norm``: the final norm per token, (..., C) -> (..., C) (the norm the head reads through).
    ``logits(prefix, patches)``: a block's raw output, prefix (B, P, C) and patches (B, N, C)
    row-major -> (B, classes): the final norm, the token the head reads (the CLS; the mean
    token where the block has none or the model pools) and the head, as the network does it
    after its last block. ``width``: the C the head reads (a block of another width has no
    readout: a Swin's earlier stages).
    """

    norm: Callable[[Tensor], Tensor]
    logits: Callable[[Tensor, Tensor], Tensor]
    width: int
