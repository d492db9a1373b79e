"""PyramidViT: vitviz's pyramid Vision Transformer (PVT v2), a kind beside the ViT and the Swin.

Overlapping convolutional stem (kernel 7, stride 4, LayerNorm) -> stages; stage s > 0 starts
with an overlapping downsampling (kernel 3, stride 2, LayerNorm); each stage's blocks use
spatial-reduction attention (see ``layers``) and end in the stage's LayerNorm; the head reads
the mean of the last stage's tokens. No CLS token, no position embedding (the depthwise
convolution in the MLP gives positions). Twins-PCPVT (config's Twins options): non-overlapping
patch embeddings, a plain MLP, a position convolution after each stage's first block, one norm
at the end. PVT v1 (config's ``pos_embed``, ``cls_last``): non-overlapping patch embeddings,
each stage's tokens plus a learned position table at its trained grid, a plain MLP, a CLS token
prepended in the last stage only, one norm at the end, the head reading the normed CLS.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from vitviz.blocks.fresh_weights import init_linears, shapes_only, stage_drop_path_rates
from vitviz.kinds.pyramid.config import PyramidConfig
from vitviz.kinds.pyramid.layers import OverlapPatchEmbed, PosConv, PyramidBlock, windows_to_grid


@dataclass
class PyramidOutput:
    """What one forward pass reports, blocks in order (stage by stage)."""

    logits: Tensor  # (B, C); the pooled features (B, D) without a head
    attentions: list[Tensor]  # per block (B, heads, N_q, N_kv), rows = queries; [] if not asked
    stage_grids: list[tuple[int, int]]  # (H_s, W_s) per stage
    block_stages: list[int] = field(default_factory=list)  # the stage of each block


class PyramidStage(nn.Module):
    """Optional downsampling (every stage but the first), the blocks, the stage's norm."""

    def __init__(self, config: PyramidConfig, stage: int, drop_paths: list[float]) -> None:
        super().__init__()
        self.downsample = (
            OverlapPatchEmbed(
                config.dims[stage - 1],
                config.dims[stage],
                config.down_kernel,
                config.down_stride,
                config.embed_eps,
                config.embed_overlap,
            )
            if stage > 0
            else None
        )
        # Twins' PEG after the first block (None for a PVT v2)
        self.pos_conv = PosConv(config.dims[stage]) if config.pos_conv else None
        self.blocks = nn.ModuleList(
            PyramidBlock(config, stage, drop_paths[j], config.window(stage, j))
            for j in range(config.depths[stage])
        )
        last = stage == config.num_stages - 1
        # PVT v1: a position table at the stage's trained grid (the CLS's first, where it has one)
        cls = config.cls_last and last
        grid = config.trained_grids()[stage]
        self.cls_token = nn.Parameter(torch.zeros(1, 1, config.dims[stage])) if cls else None
        self.pos_embed = (
            nn.Parameter(torch.zeros(1, int(cls) + grid[0] * grid[1], config.dims[stage]))
            if config.pos_embed
            else None
        )
        self.norm = (
            nn.LayerNorm(config.dims[stage], eps=config.norm_eps)
            if config.stage_norms or last
            else nn.Identity()  # Twins: only the last stage's tokens are normed
        )


class PyramidViT(nn.Module):
    """PVT v2: ``forward`` gives logits (fused attention), ``forward_explained`` also each
    block's attention (B, heads, N_q, N_kv)."""

    model_kind = "pyramid"

    def __init__(self, config: PyramidConfig) -> None:
        super().__init__()
        config.validate()
        self.config = config
        self.patch_embed = OverlapPatchEmbed(
            config.in_channels, config.dims[0], config.stem_kernel, config.patch_size,
            config.embed_eps, config.embed_overlap,
        )  # fmt: skip
        rates = stage_drop_path_rates(config.drop_path_rate, config.depths)
        self.stages = nn.ModuleList(PyramidStage(config, s, r) for s, r in enumerate(rates))
        C = config.num_classes
        self.head = nn.Linear(config.dims[-1], C) if C else nn.Identity()
        self.init_weights()

    def init_weights(self) -> None:
        """Truncated-normal (std 0.02) Linear weights, zero biases (a fresh network's)."""
        if shapes_only(self):
            return
        init_linears(self)

    @property
    def blocks(self) -> list[PyramidBlock]:
        """Every block, stage by stage."""
        return [b for stage in self.stages for b in stage.blocks]  # type: ignore[misc]

    def forward_features(
        self, x: Tensor, capture_attention: bool = False
    ) -> tuple[Tensor, PyramidOutput]:
        """(B, C_in, H, W) -> the last stage's normed tokens (B, N_S, D) and the report."""
        x = self.patch_embed(x)  # (B, H_0, W_0, D_0)
        report = PyramidOutput(logits=x.new_empty(0), attentions=[], stage_grids=[])
        for s, stage in enumerate(self.stages):
            if stage.downsample is not None:
                x = stage.downsample(x.permute(0, 3, 1, 2).contiguous())  # (B, H_s, W_s, D_s)
            B, H, W, D = x.shape
            grid = (int(H), int(W))
            report.stage_grids.append(grid)
            t = x.reshape(B, H * W, D)
            t = self.embed_positions(stage, t, grid)
            for j, block in enumerate(stage.blocks):
                t, attn = block(t, grid, capture_attention)
                report.block_stages.append(s)
                if attn is not None:
                    report.attentions.append(attn)
                if j == 0 and stage.pos_conv is not None:
                    t = stage.pos_conv(t, grid)  # Twins' PEG: not attention, no row of its own
            t = stage.norm(t)
            if stage.cls_token is None:
                x = t.reshape(B, H, W, D)
        return t, report

    def embed_positions(self, stage: PyramidStage, t: Tensor, grid: tuple[int, int]) -> Tensor:
        """PVT v1: (B, N, D) a stage's tokens -> [CLS,] tokens + its position table; unchanged
        for a model without one. The table is at the trained grid only (transformers' own
        resizing fails at another): another grid is refused."""
        if stage.cls_token is not None:
            t = torch.cat([stage.cls_token.expand(t.shape[0], -1, -1), t], dim=1)
        if stage.pos_embed is None:
            return t
        if stage.pos_embed.shape[1] != t.shape[1]:
            size = "×".join(map(str, self.config.image_size))
            raise ValueError(
                f"this PVT v1's position tables are for {size} px images; a {grid[0]}×{grid[1]} "
                f"token grid needs another size (prepare the image at {size})"
            )
        return t + stage.pos_embed

    def grid_attention(self, b: int, attn: Tensor, grid0: tuple[int, int]) -> Tensor:
        """Block ``b``'s attention (or its gradient) as computed -> (B, heads, N, M) over its
        stage's grid: a Twins-SVT window block's (B, windows, heads, t, t) made block-diagonal
        (N × N); every other block's unchanged."""
        cfg = self.config
        s = sum(1 for d in range(cfg.num_stages) if sum(cfg.depths[: d + 1]) <= b)
        ws = cfg.window(s, b - sum(cfg.depths[:s]))
        if not ws:
            return attn
        H, W = grid0
        k, st = cfg.down_kernel, cfg.down_stride
        pad = k // 2 if cfg.embed_overlap else 0
        for _ in range(s):
            H, W = (H + 2 * pad - k) // st + 1, (W + 2 * pad - k) // st + 1
        return windows_to_grid(attn, (H, W), ws)

    def forward_head(self, tokens: Tensor) -> Tensor:
        """(B, N, D) last stage's tokens -> (B, C) logits of their mean (PVT v1: of its CLS)."""
        return self.head(tokens[:, 0] if self.config.cls_last else tokens.mean(dim=1))

    def forward(self, x: Tensor) -> Tensor:
        """(B, C_in, H, W) -> (B, num_classes) logits; the fused attention path."""
        return self.forward_head(self.forward_features(x)[0])

    def forward_explained(self, x: Tensor, capture_attention: bool = True) -> PyramidOutput:
        """The forward pass that also hands back each block's attention."""
        tokens, report = self.forward_features(x, capture_attention)
        report.logits = self.forward_head(tokens)
        return report
