"""PiTViT: vitviz's Pooling-based Vision Transformer (PiT), a kind beside the ViT and the
pyramids (DESIGN §3).

Stem: Conv2d (kernel ``patch_size``, stride ``stride``) + the learned position table on its
grid -> stages; stage s > 0 starts with ``PiTPool`` (depthwise strided conv on the patch grid,
Linear on the prefix tokens); each stage's blocks are the ViT's pre-norm blocks
(``vitviz.blocks.layers.Block``: LayerNorm eps 1e-6, fused qkv with bias, GELU MLP) over
[prefix, patches row-major]. A final LayerNorm on the prefix tokens and the head(s).
Module names are timm's, so a timm state dict is this network's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from vitviz.blocks.config import ViTConfig
from vitviz.blocks.layers import Block
from vitviz.kinds.pit.config import PiTConfig


@dataclass
class PiTOutput:
    """What one forward pass reports, blocks in order (stage by stage)."""

    logits: Tensor  # (B, C); without a head what the head would read (timm's pre-logits)
    attentions: list[Tensor]  # per block (B, heads, P + N_s, P + N_s), rows = queries
    stage_grids: list[tuple[int, int]]  # (h_s, w_s) per stage
    block_stages: list[int] = field(default_factory=list)  # the stage of each block


class PiTStem(nn.Module):
    """(B, C_in, H, W) -> (B, D_0, h_0, w_0): one overlapping convolution."""

    def __init__(self, config: PiTConfig) -> None:
        super().__init__()
        self.conv = nn.Conv2d(
            config.in_channels, config.dims[0], config.patch_size, stride=config.stride
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(x)


class PiTPool(nn.Module):
    """Between stages: patches (B, D, h, w) by a depthwise strided conv, prefix tokens (B, P, D)
    by a Linear, each to the next stage's width."""

    def __init__(self, dim_in: int, dim_out: int, stride: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(
            dim_in, dim_out, stride + 1, stride=stride, padding=stride // 2, groups=dim_in
        )
        self.fc = nn.Linear(dim_in, dim_out)

    def forward(self, x: Tensor, prefix: Tensor) -> tuple[Tensor, Tensor]:
        return self.conv(x), self.fc(prefix)


def block_config(config: PiTConfig, stage: int) -> ViTConfig:
    """The ViT block settings of ``stage``'s blocks."""
    return ViTConfig(
        image_size=config.image_size,
        patch_size=config.stride,
        num_classes=0,
        dim=config.dims[stage],
        depth=config.depths[stage],
        heads=config.heads[stage],
        mlp_hidden_dim=config.mlp_hidden_dims[stage],
        qkv_bias=config.qkv_bias,
        norm_eps=config.norm_eps,
    )


class PiTStage(nn.Module):
    """A stage: the pooling (every stage but the first) and the blocks."""

    def __init__(self, config: PiTConfig, stage: int) -> None:
        super().__init__()
        self.pool = (
            PiTPool(config.dims[stage - 1], config.dims[stage], config.pool_stride)
            if stage > 0
            else None
        )
        settings = block_config(config, stage)
        self.blocks = nn.ModuleList(Block(settings) for _ in range(config.depths[stage]))


class PiTViT(nn.Module):
    """PiT: ``forward`` gives logits (fused attention), ``forward_explained`` also each block's
    attention (B, heads, P + N_s, P + N_s)."""

    model_kind = "pit"

    def __init__(self, config: PiTConfig) -> None:
        super().__init__()
        config.validate()
        self.config = config
        D0, P = config.dims[0], config.num_tokens
        self.patch_embed = PiTStem(config)
        self.pos_embed = nn.Parameter(torch.zeros(1, D0, *config.stem_grid))
        self.cls_token = nn.Parameter(torch.zeros(1, P, D0))
        self.transformers = nn.ModuleList(PiTStage(config, s) for s in range(config.num_stages))
        D, C = config.dims[-1], config.num_classes
        self.norm = nn.LayerNorm(D, eps=config.norm_eps)
        self.head = nn.Linear(D, C) if C else nn.Identity()
        self.head_dist = (nn.Linear(D, C) if C else nn.Identity()) if P == 2 else None

    @property
    def num_prefix_tokens(self) -> int:
        return int(self.config.num_tokens)

    @property
    def blocks(self) -> list[Block]:
        """Every block, stage by stage."""
        return [b for stage in self.transformers for b in stage.blocks]  # type: ignore[misc]

    def forward_features(
        self, x: Tensor, capture_attention: bool = False
    ) -> tuple[Tensor, PiTOutput]:
        """(B, C_in, H, W) -> the final-normed prefix tokens (B, P, D) and the report."""
        x = self.patch_embed(x)
        if tuple(x.shape[-2:]) != tuple(self.pos_embed.shape[-2:]):
            h, w = self.pos_embed.shape[-2:]
            H, W = self.config.image_size
            raise ValueError(
                f"a PiT's position table is learnt on a {h}×{w} grid: this input gives "
                f"{x.shape[-2]}×{x.shape[-1]}; analyse it at the model's own input size {H}×{W}"
            )
        x = x + self.pos_embed  # (B, D, h, w)
        prefix = self.cls_token.expand(x.shape[0], -1, -1)
        P = prefix.shape[1]
        report = PiTOutput(logits=x.new_empty(0), attentions=[], stage_grids=[])
        for s, stage in enumerate(self.transformers):
            if stage.pool is not None:
                x, prefix = stage.pool(x, prefix)
            B, D, h, w = x.shape
            report.stage_grids.append((int(h), int(w)))
            t = torch.cat((prefix, x.flatten(2).transpose(1, 2)), dim=1)
            for block in stage.blocks:
                t, attn = block(t, capture=capture_attention)
                report.block_stages.append(s)
                if attn is not None:
                    report.attentions.append(attn)
            prefix = t[:, :P]
            x = t[:, P:].transpose(1, 2).reshape(B, D, h, w)
        return self.norm(prefix), report

    def forward_head(self, prefix: Tensor) -> Tensor:
        """(B, P, D) normed prefix tokens -> (B, C): the head on the CLS; distilled, the mean of
        it and the distillation head on the second token (timm's inference)."""
        if self.head_dist is None:
            return self.head(prefix[:, 0])
        return (self.head(prefix[:, 0]) + self.head_dist(prefix[:, 1])) / 2

    def forward(self, x: Tensor) -> Tensor:
        """(B, C_in, H, W) -> (B, num_classes) logits; the fused attention path."""
        return self.forward_head(self.forward_features(x)[0])

    def forward_explained(self, x: Tensor, capture_attention: bool = True) -> PiTOutput:
        """The forward pass that also hands back each block's attention."""
        prefix, report = self.forward_features(x, capture_attention)
        report.logits = self.forward_head(prefix)
        return report
