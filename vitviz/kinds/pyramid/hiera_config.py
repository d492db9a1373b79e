"""HieraConfig: every number and switch needed to rebuild vitviz's Hiera (timm ``hiera_*``).

A Hiera's stem is one Conv2d (kernel ``patch_kernel``, stride ``patch_stride``, padding
``patch_padding``); every later stage starts with a block whose queries (and residual) are
max-pooled 2 × 2 (``q_stride``) and whose width doubles; the first stages attend within mask
units (``mask_unit`` first-stage tokens per side, the same image area at every stage), the
later ones globally. Only timm's schedule is supported: every stage after the first pools
(timm's ``q_pool`` = stages − 1) and the mask unit is ``q_stride`` ** (stages − 1) per side.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from vitviz.blocks.config import _pair
from vitviz.kinds.staged_config import StagedConfig


@dataclass
class HieraConfig(StagedConfig):
    """Architecture of a Hiera: stage s has ``depths[s]`` blocks of width ``dims[s]`` with
    ``heads[s]`` heads and MLPs of ``mlp_hidden_dims[s]``; ``mask_unit_attn[s]``: attention
    within mask units (else global)."""

    NOUN: ClassVar[str] = "Hiera"

    image_size: tuple[int, int] = (224, 224)
    in_channels: int = 3
    num_classes: int = 1000
    dims: tuple[int, ...] = (96, 192, 384, 768)
    depths: tuple[int, ...] = (1, 2, 7, 2)
    heads: tuple[int, ...] = (1, 2, 4, 8)
    mlp_hidden_dims: tuple[int, ...] = (384, 768, 1536, 3072)
    mask_unit_attn: tuple[bool, ...] = (True, True, False, False)
    mask_unit: tuple[int, int] = (8, 8)  # first-stage tokens per side of a mask unit
    q_stride: tuple[int, int] = (2, 2)
    patch_kernel: int = 7
    patch_stride: int = 4  # input pixels per side of a first-stage token
    patch_padding: int = 3
    abs_win_pos: bool = False  # abswin: a global table resized (bicubic) + a tiled window table
    global_pos_size: tuple[int, int] = (14, 14)
    norm_eps: float = 1e-6  # every LayerNorm's (timm's LayerNorm)
    layer_scale: bool = False  # per-channel scales on both branches (ls1, ls2: abswin)
    expand_proj: bool = True  # widen the residual by a Linear; else [max, mean] of x (doubles)

    def __post_init__(self) -> None:
        self.image_size = _pair(self.image_size)
        self.mask_unit = _pair(self.mask_unit)
        self.q_stride = _pair(self.q_stride)
        self.global_pos_size = _pair(self.global_pos_size)
        for name in ("dims", "depths", "heads", "mlp_hidden_dims"):
            setattr(self, name, tuple(int(v) for v in getattr(self, name)))
        self.mask_unit_attn = tuple(bool(v) for v in self.mask_unit_attn)

    @property
    def patch_size(self) -> int:
        return self.patch_stride

    @property
    def token_grid(self) -> tuple[int, int]:
        """(H_0, W_0) first-stage tokens."""
        return (
            self.image_size[0] // self.patch_stride,
            self.image_size[1] // self.patch_stride,
        )

    def stage_stride(self, stage: int) -> int:
        """Input pixels per side of a token of ``stage``."""
        return self.patch_stride * self.q_stride[0] ** stage

    def validate(self) -> None:
        S = self.num_stages
        if S == 0:
            raise ValueError("a Hiera needs at least one stage")
        per = (self.dims, self.heads, self.mlp_hidden_dims, self.mask_unit_attn)
        if {len(v) for v in per} != {S}:
            raise ValueError("dims, heads, mlp_hidden_dims and mask_unit_attn need one per stage")
        for s in range(S):
            if min(self.depths[s], self.heads[s], self.mlp_hidden_dims[s]) < 1:
                raise ValueError(f"stage {s}: depth, heads and MLP width must be positive")
            if self.dims[s] % self.heads[s]:
                raise ValueError(f"stage {s}: width {self.dims[s]} not divisible by its heads")
        if self.q_stride[0] != self.q_stride[1]:
            raise ValueError("vitviz's Hiera needs a square q_stride")
        unit = tuple(q ** (S - 1) for q in self.q_stride)
        if self.mask_unit != unit:
            raise ValueError(f"mask unit {self.mask_unit} is not q_stride ** (stages - 1) = {unit}")
        H, W = self.token_grid
        if H % self.mask_unit[0] or W % self.mask_unit[1] or H == 0 or W == 0:
            raise ValueError(
                f"the {H}×{W} token grid is not a whole number of {self.mask_unit} mask units"
            )
        if not self.expand_proj and any(
            b != 2 * a for a, b in zip(self.dims, self.dims[1:], strict=False)
        ):
            raise ValueError("without expand_proj every stage must double the width")
        if self.num_classes < 0 or min(self.patch_kernel, self.patch_stride) < 1:
            raise ValueError("classes must not be negative, the stem's kernel and stride positive")
