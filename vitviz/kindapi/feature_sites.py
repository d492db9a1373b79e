"""A CAM method's target layer (DESIGN §5, the CAM family): which tensor of which block it reads,
and where that tensor's tokens sit on the block's grid, as every kind answers it
(``ModelKind.feature_site``, DESIGN §3).

A layer is written ``B.part``: block B (counted from 0 over every block of the model, as the
intermediates accessor's ``blocks`` are; −1 the last) and part ``norm1`` (the block's first
LayerNorm's output), ``norm2`` (its second) or ``output`` (the block's output); a bare ``B`` is
the block's output. ``auto`` is the kind's usual layer of the last block: its norm1 where that is
a pre-norm (``ModelKind.norm1_is_pre_norm``: its output is the normalised tokens the block's
attention reads, token Grad-CAM's features), else its output (a post-norm block's norm1 follows
the attention), where the kind says nothing else (``KindBase.default_cam_part``).

Imports no torch at run time (the types are named for checkers only).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import Tensor, nn

PARTS = ("norm1", "norm2", "output")
DEFAULT_LAYER = "auto"  # the kind's usual layer: the last block's norm1 if a pre-norm, else output


@dataclass(frozen=True)
class LayerChoice:
    """Block ``block`` (−1: the last) and its ``part`` (one of ``PARTS``, or ``auto``)."""

    block: int
    part: str

    @property
    def text(self) -> str:
        return DEFAULT_LAYER if self.part == DEFAULT_LAYER else f"{self.block}.{self.part}"

    def resolved(self, depth: int) -> LayerChoice:
        """The same layer with −1 read as the last of ``depth`` blocks; ValueError out of
        range."""
        b = depth - 1 if self.block == -1 else self.block
        if not 0 <= b < depth:
            raise ValueError(
                f"layer {self.text}: block {self.block} is out of range (the model has blocks "
                f"0–{depth - 1}, or -1 for the last)"
            )
        return LayerChoice(b, self.part)


def parse_layer(text: str) -> LayerChoice:
    """``"1.norm1"``, ``"-1.output"``, ``"3"`` (the block's output) -> ``LayerChoice``;
    ValueError with the accepted forms otherwise."""
    if str(text).strip() == DEFAULT_LAYER:
        return LayerChoice(-1, DEFAULT_LAYER)
    block, _, part = str(text).strip().partition(".")
    part = part or "output"
    try:
        b = int(block)
    except ValueError:
        b = None
    if b is None or b < -1 or part not in PARTS:
        raise ValueError(
            f"layer must be BLOCK.PART with BLOCK a block from 0 (or -1, the last) and PART one "
            f"of {', '.join(PARTS)}, e.g. 1.norm1, or {DEFAULT_LAYER} (got {text!r})"
        )
    return LayerChoice(b, part)


@dataclass(frozen=True)
class FeatureSite:
    """Where a kind reads a layer's features: ``module``'s forward output; ``tensor`` picks the
    token tensor from that output (a block may return (tokens, attention)), channels last
    ((B, N, C) or (B, H, W, C)); ``to_grid(tokens, (h, w))`` puts that tensor's grid tokens on
    the block's grid (``Intermediates.block_grids``), (B, C, h, w), prefix tokens left out;
    ``replace`` gives the module's output with
    its token tensor swapped for another of the same shape (to change it inside the pass)."""

    module: nn.Module
    tensor: Callable[[Any], Tensor]
    to_grid: Callable[[Tensor, tuple[int, int]], Tensor]
    replace: Callable[[Any, Tensor], Any]
    depth: int  # the model's blocks
    layer: LayerChoice  # the layer read: ``auto`` resolved, its block counted from 0


@dataclass(frozen=True)
class CamLayers:
    """A model's CAM layers as the window offers them (DESIGN §5): ``depth`` blocks (0: none
    vitviz can read), ``auto`` the layer ``auto`` reads (``B.part``, B from 0; "" without
    blocks), ``post_norm`` the blocks whose norm1 follows their attention (a post-norm block:
    its output is not the tokens the attention reads)."""

    depth: int = 0
    auto: str = ""
    post_norm: tuple[int, ...] = ()


def first_item(output: Any) -> Tensor:
    """A module's token tensor: its output, or the first item of a tuple output."""
    return output[0] if isinstance(output, tuple) else output


def with_first_item(output: Any, tokens: Tensor) -> Any:
    """``output`` with its token tensor (itself, or its tuple's first item) swapped."""
    return (tokens, *output[1:]) if isinstance(output, tuple) else tokens
