"""PiTConfig: every number and switch needed to rebuild vitviz's PiT (Heo et al. 2021, timm's
``pit_*``).

A PiT's stem is one overlapping Conv2d (kernel ``patch_size``, stride ``stride``, no padding);
a learned position table of the stem's grid is added to its output, so the input is the size
the model was trained at. Its CLS token (two with ``num_tokens`` 2: CLS and distillation) goes
through every stage: stage s > 0 starts with a pooling layer, a depthwise strided conv on the
patch grid (kernel ``pool_stride`` + 1, padding ``pool_stride`` // 2, width ×
``dims[s] / dims[s-1]``) and a Linear on the prefix tokens, then pre-norm ViT blocks over
[prefix, patches]. A final LayerNorm on the prefix tokens, the head on the CLS (distilled: the
mean of the head on the CLS and the distillation head on the second token).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from vitviz.blocks.config import _pair
from vitviz.kinds.staged_config import StagedConfig


@dataclass
class PiTConfig(StagedConfig):
    """Architecture of a PiT: stage s has ``depths[s]`` blocks of width ``dims[s]`` with
    ``heads[s]`` heads and an MLP of ``mlp_hidden_dims[s]`` channels."""

    NOUN: ClassVar[str] = "PiT"

    image_size: tuple[int, int] = (224, 224)
    patch_size: int = 16  # the stem's kernel
    stride: int = 8  # the stem's stride: input pixels per side of a first-stage token
    in_channels: int = 3
    num_classes: int = 1000
    dims: tuple[int, ...] = (64, 128, 256)
    depths: tuple[int, ...] = (2, 6, 4)
    heads: tuple[int, ...] = (2, 4, 8)
    mlp_hidden_dims: tuple[int, ...] = (256, 512, 1024)
    num_tokens: int = 1  # prefix tokens: 1 (CLS) or 2 (CLS and distillation, ``*_distilled_*``)
    pool_stride: int = 2  # the pooling conv's stride (its kernel: one more)
    qkv_bias: bool = True
    norm_eps: float = 1e-6  # the blocks' and the final LayerNorm's (timm's)

    def __post_init__(self) -> None:
        self.image_size = _pair(self.image_size)
        for name in ("dims", "depths", "heads", "mlp_hidden_dims"):
            setattr(self, name, tuple(int(v) for v in getattr(self, name)))

    @property
    def stem_grid(self) -> tuple[int, int]:
        """(h, w) of the stem's output (and of the position table) at ``image_size``."""
        return tuple((n - self.patch_size) // self.stride + 1 for n in self.image_size)  # type: ignore[return-value]

    def stage_grids(self) -> list[tuple[int, int]]:
        """(h, w) of every stage's patch grid at ``image_size``."""
        k, st, pad = self.pool_stride + 1, self.pool_stride, self.pool_stride // 2
        grids = [self.stem_grid]
        for _ in range(1, self.num_stages):
            h, w = grids[-1]
            grids.append(((h + 2 * pad - k) // st + 1, (w + 2 * pad - k) // st + 1))
        return grids

    def stage_stride(self, stage: int) -> int:
        """Input pixels per side of a token of ``stage`` (the strides multiplied)."""
        return self.stride * self.pool_stride**stage

    def validate(self) -> None:
        S = self.num_stages
        if S == 0:
            raise ValueError("a PiT needs at least one stage")
        if {len(self.dims), len(self.heads), len(self.mlp_hidden_dims)} != {S}:
            raise ValueError("dims, depths, heads and mlp_hidden_dims need one per stage")
        for s in range(S):
            if min(self.depths[s], self.heads[s], self.mlp_hidden_dims[s]) < 1:
                raise ValueError(f"stage {s}: depth, heads and MLP width must be positive")
            if self.dims[s] % self.heads[s]:
                raise ValueError(
                    f"stage {s}: width {self.dims[s]} is not divisible by {self.heads[s]} heads"
                )
            if s and self.dims[s] % self.dims[s - 1]:
                raise ValueError(
                    f"stage {s}: width {self.dims[s]} is no multiple of the stage before's "
                    f"{self.dims[s - 1]} (the pooling conv is depthwise)"
                )
        if min(self.patch_size, self.stride, self.in_channels, self.pool_stride) < 1:
            raise ValueError("patch size, strides and channels must be positive")
        if self.num_tokens not in (1, 2):
            raise ValueError(
                f"num_tokens is 1 (CLS) or 2 (CLS, distillation), not {self.num_tokens}"
            )
        if self.num_classes < 0:
            raise ValueError("classes must not be negative")
        if min(min(g) for g in self.stage_grids()) < 1:
            raise ValueError(f"image size {self.image_size} is too small for the stem and pools")
