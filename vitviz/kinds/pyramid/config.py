"""PyramidConfig: every number and switch needed to rebuild vitviz's pyramid ViT (PVT v2).

A pyramid ViT's token grid shrinks from stage to stage: an overlapping convolutional stem
(kernel ``stem_kernel``, stride ``patch_size``) makes the first stage's tokens, and every later
stage starts with another overlapping convolution (kernel ``down_kernel``, stride
``down_stride``) that halves the grid. Inside a stage the attention is spatial-reduction
attention: queries from every token, keys and values from the tokens reduced by a strided
convolution of stride ``sr_ratios[s]`` (or, ``linear``, by an adaptive average pool to
``pool_size`` × ``pool_size`` and a 1 × 1 convolution), so a block's attention is
(heads, N_q, N_kv), not square where the reduction is > 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from vitviz.blocks.config import _pair
from vitviz.kinds.staged_config import StagedConfig


@dataclass
class PyramidConfig(StagedConfig):
    """Architecture of a PVT v2: stage s has ``depths[s]`` blocks of width ``dims[s]`` with
    ``heads[s]`` heads, keys reduced ``sr_ratios[s]`` times per side and an MLP of
    ``mlp_hidden_dims[s]`` channels with a depthwise 3 × 3 convolution."""

    NOUN: ClassVar[str] = "pyramid ViT"

    image_size: tuple[int, int] = (224, 224)
    patch_size: int = 4  # the stem's stride: input pixels per side of a first-stage token
    in_channels: int = 3
    num_classes: int = 1000
    dims: tuple[int, ...] = (64, 128, 320, 512)
    depths: tuple[int, ...] = (3, 4, 6, 3)
    heads: tuple[int, ...] = (1, 2, 5, 8)
    sr_ratios: tuple[int, ...] = (8, 4, 2, 1)
    mlp_hidden_dims: tuple[int, ...] = (512, 1024, 1280, 2048)
    linear: bool = False  # keys pooled to pool_size² (PVT v2 "li"), an extra ReLU in the MLP
    pool_size: int = 7
    qkv_bias: bool = True
    stem_kernel: int = 7
    down_kernel: int = 3
    down_stride: int = 2
    norm_eps: float = 1e-6  # the blocks' and stages' LayerNorms (timm's LayerNorm)
    embed_eps: float = 1e-5  # the stem's, downsamplings' and key reduction's (torch's default)
    drop_path_rate: float = 0.0
    scale_after: bool = (
        False  # captured scores (q·kᵀ)/√d (transformers) instead of (q/√d)·kᵀ (timm)
    )
    # Twins-PCPVT's options (timm's twins_pcpvt_*); the defaults are PVT v2's
    embed_overlap: bool = True  # patch embeddings pad kernel // 2; False: none (kernel = stride)
    mlp_dwconv: bool = True  # the MLP's depthwise 3 × 3 conv; False: fc1, GELU, fc2
    pos_conv: bool = False  # x + depthwise 3 × 3 conv(x) after each stage's first block (PEG)
    stage_norms: bool = True  # a LayerNorm ends every stage; False: the last stage's only
    windows: tuple[int, ...] = ()  # Twins-SVT: per stage ws, blocks 0, 2, … attend in ws × ws
    # PVT v1's options (transformers' PvtModel): a learned position table per stage at its trained
    # grid, and a CLS token prepended in the last stage only, which the head reads (DESIGN §5)
    pos_embed: bool = False
    cls_last: bool = False

    def __post_init__(self) -> None:
        self.image_size = _pair(self.image_size)
        for name in ("dims", "depths", "heads", "sr_ratios", "mlp_hidden_dims", "windows"):
            setattr(self, name, tuple(int(v) for v in getattr(self, name)))

    def window(self, stage: int, block: int) -> int:
        """The window side of block ``block`` of ``stage`` (Twins-SVT's even blocks), 0: global."""
        ws = self.windows[stage] if self.windows else 0
        return ws if ws > 1 and block % 2 == 0 else 0

    def trained_grids(self) -> list[tuple[int, int]]:
        """(H_s, W_s) per stage at ``image_size``: the stem's and downsamplings' arithmetic."""
        grids, (H, W) = [], self.image_size
        for s in range(self.num_stages):
            k, st = (self.stem_kernel, self.patch_size) if s == 0 else (
                self.down_kernel, self.down_stride
            )  # fmt: skip
            pad = k // 2 if self.embed_overlap else 0
            H, W = (H + 2 * pad - k) // st + 1, (W + 2 * pad - k) // st + 1
            grids.append((H, W))
        return grids

    def stage_stride(self, stage: int) -> int:
        """Input pixels per side of a token of ``stage`` (the strides multiplied)."""
        return self.patch_size * self.down_stride**stage

    def validate(self) -> None:
        S = self.num_stages
        if S == 0:
            raise ValueError("a pyramid ViT needs at least one stage")
        if {len(self.dims), len(self.heads), len(self.sr_ratios), len(self.mlp_hidden_dims)} != {S}:
            raise ValueError(
                "dims, depths, heads, sr_ratios and mlp_hidden_dims need one per stage"
            )
        for s in range(S):
            if min(self.depths[s], self.heads[s], self.sr_ratios[s], self.mlp_hidden_dims[s]) < 1:
                raise ValueError(
                    f"stage {s}: depth, heads, reduction and MLP width must be positive"
                )
            if self.dims[s] % self.heads[s]:
                raise ValueError(
                    f"stage {s}: width {self.dims[s]} is not divisible by {self.heads[s]} heads"
                )
        if min(self.patch_size, self.in_channels, self.stem_kernel, self.down_kernel) < 1:
            raise ValueError("patch size, channels and kernels must be positive")
        if self.windows and (len(self.windows) != S or min(self.windows) < 1):
            raise ValueError("windows needs one positive window side per stage (or none)")
        if self.cls_last and (self.sr_ratios[-1] != 1 or self.linear or self.windows):
            raise ValueError(
                "a CLS token in the last stage needs that stage's keys unreduced (sr 1): a "
                "reduction convolution can't read the CLS token"
            )
        if self.num_classes < 0 or self.pool_size < 1 or self.down_stride < 1:
            raise ValueError("classes must not be negative, pool size and stride positive")
