"""SwinTransformer: vitviz's second model kind (Swin v1 and v2), beside the ViT (DESIGN §3).

Patch embedding, stages of (shifted) window attention with relative position bias joined by
2 × 2 patch merging, final LayerNorm, average pool over the last stage's tokens, linear head.
Any input size works: maps are padded to whole windows as the library that made the weights
does (SwinConfig's layout switches).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import Tensor, nn

from vitviz.blocks.fresh_weights import init_linears, shapes_only, stage_drop_path_rates
from vitviz.kinds.swin.config import SwinConfig
from vitviz.kinds.swin.layers import PatchMerging, SwinBlock, SwinPatchEmbed
from vitviz.kinds.swin.windows import WindowLayout


@dataclass
class SwinOutput:
    """Everything one forward pass of a Swin can report, blocks in order (stage by stage)."""

    logits: Tensor  # (B, C); the pooled features (B, D) when the model has no head
    attentions: list[Tensor]  # per block (B, windows, heads, n, n), rows = queries; [] if not asked
    layouts: list[WindowLayout]  # per block: grid, window, shift, padding of its partition
    stage_grids: list[tuple[int, int]]  # (H_s, W_s) per stage
    block_stages: list[int] = field(default_factory=list)  # the stage of each block
    hidden_states: list[Tensor] = field(default_factory=list)  # per block (B, H, W, C) if asked


class SwinStage(nn.Module):
    """Optional patch merging (every stage but the first), then the stage's blocks."""

    def __init__(self, config: SwinConfig, stage: int, drop_paths: list[float]) -> None:
        super().__init__()
        self.merge = (
            PatchMerging(
                config.dims[stage - 1],
                config.dims[stage],
                config.norm_eps,
                config.version == 2 and not config.cr,  # CR normalises before, as v1
            )
            if stage > 0
            else None
        )
        self.blocks = nn.ModuleList(
            SwinBlock(
                config,
                stage,
                shifted=j % 2 == 1,
                drop_path=drop_paths[j],
                extra_norm=sum(config.depths[:stage]) + j in config.extra_norm_blocks,
            )
            for j in range(config.depths[stage])
        )


class SwinTransformer(nn.Module):
    """Swin v1 / v2: ``forward`` gives logits (fused attention), ``forward_explained`` also
    the attention."""

    model_kind = "swin"  # what the method table matches ``applies_to`` against

    def __init__(self, config: SwinConfig) -> None:
        super().__init__()
        config.validate()
        self.config = config
        self.patch_embed = SwinPatchEmbed(config)
        rates = stage_drop_path_rates(config.drop_path_rate, config.depths)
        self.stages = nn.ModuleList(SwinStage(config, s, r) for s, r in enumerate(rates))
        self.norm: nn.Module = (
            nn.LayerNorm(config.dims[-1], eps=config.norm_eps)
            if config.final_norm
            else nn.Identity()
        )
        C = config.num_classes
        self.head = nn.Linear(config.dims[-1], C) if C else nn.Identity()
        self.init_weights()

    def init_weights(self) -> None:
        """Truncated-normal (std 0.02) Linear weights and bias tables, zero biases."""
        if shapes_only(self):
            return
        for name, p in self.named_parameters():
            if name.endswith("relative_position_bias_table"):
                nn.init.trunc_normal_(p, std=0.02)
        init_linears(self)

    @property
    def blocks(self) -> list[SwinBlock]:
        """Every block, stage by stage."""
        return [b for stage in self.stages for b in stage.blocks]  # type: ignore[misc]

    def forward_features(
        self, x: Tensor, capture_attention: bool = False, hidden_states: bool = False
    ) -> tuple[Tensor, SwinOutput]:
        """(B, C_in, H, W) -> final normed map (B, H_S, W_S, D) and what the blocks reported
        (``logits`` of the report left empty)."""
        x = self.patch_embed(x)  # (B, H_0, W_0, D_0)
        report = SwinOutput(logits=x.new_empty(0), attentions=[], layouts=[], stage_grids=[])
        for s, stage in enumerate(self.stages):
            if stage.merge is not None:
                x = stage.merge(x)
            report.stage_grids.append((x.shape[1], x.shape[2]))
            for block in stage.blocks:
                x, attn, layout = block(x, capture=capture_attention)
                report.layouts.append(layout)
                report.block_stages.append(s)
                if attn is not None:
                    report.attentions.append(attn)
                if hidden_states:
                    report.hidden_states.append(x)
        return self.norm(x), report

    def forward_head(self, x: Tensor) -> Tensor:
        """(B, H, W, D) final map -> (B, C) logits from the average of its tokens."""
        return self.head(x.mean(dim=(1, 2)))

    def forward(self, x: Tensor) -> Tensor:
        """(B, C_in, H, W) -> (B, num_classes) logits; the fused attention path."""
        features, _ = self.forward_features(x)
        return self.forward_head(features)

    def forward_explained(
        self, x: Tensor, capture_attention: bool = True, hidden_states: bool = False
    ) -> SwinOutput:
        """Forward pass that also hands back each block's window attention and layout."""
        features, report = self.forward_features(x, capture_attention, hidden_states)
        report.logits = self.forward_head(features)
        return report
