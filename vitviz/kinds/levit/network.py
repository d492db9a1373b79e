"""LeViTNet: vitviz's LeViT (Graham et al. 2021), a staged kind (DESIGN §3).

Stem: stride-2 3×3 convs with BatchNorm, the activation between them -> tokens (B, N_0, D_0)
row-major on the stem's grid. Stage s > 0 starts with ``LeViTDownsample`` (the subsample
attention from the stage's grid to the previous one's tokens, then an MLP residual); each
stage's ``LeViTBlock``s add attention and an MLP to their input. The head: the mean token,
``NormLinear`` (BatchNorm, Linear), distilled the mean of two. Every BatchNorm computes with its
running statistics (the library's eval mode), unfused. Module names and layouts are timm's
(``config.conv``: timm's ``levit_conv_*``, 1×1 convs on (B, C, h, w)), so a timm state dict is
this network's, and each layout computes in the library's order (its float32 rounding).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vitviz.kinds.levit.config import DOWN_MLP_RATIO, DOWN_VALUE_RATIO, LeViTConfig


@dataclass
class LeViTOutput:
    """What one forward pass reports, attention layers in order (a stage's subsample first)."""

    logits: Tensor  # (B, C); without a head the mean token (timm's pre-logits)
    attentions: list[Tensor]  # per layer (B, heads, N_q, N_k), rows = queries
    stage_grids: list[tuple[int, int]]  # (h_s, w_s) per stage
    layer_stages: list[int] = field(default_factory=list)  # the stage of each layer


def activation(name: str) -> nn.Module:
    return nn.Hardswish() if name == "hard_swish" else nn.SiLU()


class EvalBatchNorm(nn.BatchNorm1d):
    """A BatchNorm over the channels of ``dim`` that always uses its running statistics (the
    library's eval mode): (x − mean) / √(var + eps) · weight + bias."""

    def __init__(self, channels: int, eps: float, dim: int = -1) -> None:
        super().__init__(channels, eps=eps)
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        if self.dim == 1:  # (B, C, ...) as the library's BatchNorm2d takes it
            return F.batch_norm(
                x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0, self.eps
            )
        moved = x.movedim(self.dim, -1)
        flat = moved.reshape(-1, moved.shape[-1])
        out = F.batch_norm(
            flat, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0, self.eps
        )
        return out.reshape(moved.shape).movedim(-1, self.dim)


class LinearNorm(nn.Module):
    """Linear (no bias) then BatchNorm: (B, N, C_in) -> (B, N, C_out); in the conv layout a
    1×1 conv then BatchNorm over the channels, (B, C_in, h, w) -> (B, C_out, h, w)."""

    def __init__(self, dim_in: int, dim_out: int, eps: float, conv: bool = False) -> None:
        super().__init__()
        self.linear: nn.Module = (
            nn.Conv2d(dim_in, dim_out, 1, bias=False)
            if conv
            else nn.Linear(dim_in, dim_out, bias=False)
        )
        self.bn = EvalBatchNorm(dim_out, eps, dim=1 if conv else -1)

    def forward(self, x: Tensor) -> Tensor:
        return self.bn(self.linear(x))


class ConvNorm(nn.Module):
    """A stem conv: 3×3, stride 2, padding 1, no bias, then BatchNorm over the channels."""

    def __init__(self, dim_in: int, dim_out: int, eps: float) -> None:
        super().__init__()
        self.linear = nn.Conv2d(dim_in, dim_out, 3, stride=2, padding=1, bias=False)
        self.bn = EvalBatchNorm(dim_out, eps, dim=1)

    def forward(self, x: Tensor) -> Tensor:
        return self.bn(self.linear(x))


class NormLinear(nn.Module):
    """The head: BatchNorm, then Linear with bias, (B, D) -> (B, C)."""

    def __init__(self, dim: int, classes: int, eps: float) -> None:
        super().__init__()
        self.bn = EvalBatchNorm(dim, eps)
        self.linear = nn.Linear(dim, classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear(self.bn(x))


class LeViTStem(nn.Sequential):
    """(B, C_in, H, W) -> (B, D, H/stride, W/stride): conv1, act1, conv2, … (no act after the
    last); widths D/8, D/4, D/2, D (stride 16) or D/4, D/2, D (stride 8)."""

    def __init__(self, config: LeViTConfig) -> None:
        super().__init__()
        n, D = config.stem_convs, config.dims[0]
        widths = [config.in_channels] + [D // 2 ** (n - 1 - i) for i in range(n)]
        for i in range(n):
            self.add_module(f"conv{i + 1}", ConvNorm(widths[i], widths[i + 1], config.bn_eps))
            if i < n - 1:
                self.add_module(f"act{i + 1}", activation(config.activation))


def bias_index(queries: tuple[int, int], keys: tuple[int, int], stride: int) -> Tensor:
    """(N_q, N_k) long: |y_q·stride − y_k|·w_k + |x_q·stride − x_k| for a query at (y_q, x_q)
    of its grid and a key at (y_k, x_k) of the keys' grid (row-major), the learned bias table's
    index of the pair's offset."""
    qy, qx = torch.meshgrid(
        torch.arange(queries[0]) * stride, torch.arange(queries[1]) * stride, indexing="ij"
    )
    ky, kx = torch.meshgrid(torch.arange(keys[0]), torch.arange(keys[1]), indexing="ij")
    dy = (qy.reshape(-1, 1) - ky.reshape(1, -1)).abs()
    dx = (qx.reshape(-1, 1) - kx.reshape(1, -1)).abs()
    return dy * keys[1] + dx


def attend(
    q: Tensor, k: Tensor, v: Tensor, bias: Tensor, capture: bool
) -> tuple[Tensor, Tensor | None]:
    """q (B, N_q, h, d), k (B, N_k, h, d), v (B, N_k, h, e), bias (h, N_q, N_k) -> the heads'
    outputs concatenated (B, N_q, h·e) and A = softmax(q·kᵀ/√d + bias) (B, h, N_q, N_k) when
    ``capture`` (the library's order of operations, so its float32 rounding)."""
    scale = q.shape[-1] ** -0.5
    q, k, v = q.permute(0, 2, 1, 3), k.permute(0, 2, 3, 1), v.permute(0, 2, 1, 3)
    attn = (q @ k * scale + bias).softmax(dim=-1)
    out = (attn @ v).transpose(1, 2).reshape(v.shape[0], attn.shape[2], -1)
    return out, attn if capture else None


def attend_channels(
    q: Tensor, k: Tensor, v: Tensor, bias: Tensor, capture: bool
) -> tuple[Tensor, Tensor | None]:
    """The conv layout's: q (B, h, d, N_q), k (B, h, d, N_k), v (B, h, e, N_k) -> the heads'
    outputs (B, h·e, N_q) channels first and A (B, h, N_q, N_k) when ``capture``."""
    scale = q.shape[2] ** -0.5
    attn = ((q.transpose(-2, -1) @ k) * scale + bias).softmax(dim=-1)
    out = v @ attn.transpose(-2, -1)  # (B, h, e, N_q)
    return out.reshape(out.shape[0], -1, out.shape[-1]), attn if capture else None


class LeViTAttention(nn.Module):
    """Self-attention on a stage's grid with a learned bias per head and offset: (B, N, D) ->
    (B, N, D) and the probabilities (B, heads, N, N)."""

    def __init__(self, config: LeViTConfig, stage: int, grid: tuple[int, int]) -> None:
        super().__init__()
        D, h, eps, conv = config.dims[stage], config.heads[stage], config.bn_eps, config.conv
        self.heads, self.key_dim, self.value_dim = h, config.key_dim, config.value_dims[stage]
        self.grid, self.conv = grid, conv
        self.qkv = LinearNorm(D, h * (2 * self.key_dim + self.value_dim), eps, conv)
        self.proj = nn.Sequential(
            OrderedDict(
                act=activation(config.activation),
                ln=LinearNorm(h * self.value_dim, D, eps, conv),
            )
        )
        self.attention_biases = nn.Parameter(torch.zeros(h, grid[0] * grid[1]))

    def forward(self, x: Tensor, capture: bool = False) -> tuple[Tensor, Tensor | None]:
        bias = self.attention_biases[:, bias_index(self.grid, self.grid, 1).to(x.device)]
        sizes = [self.key_dim, self.key_dim, self.value_dim]
        if self.conv:
            B, _, H, W = x.shape
            q, k, v = self.qkv(x).view(B, self.heads, -1, H * W).split(sizes, dim=2)
            out, attn = attend_channels(q, k, v, bias, capture)
            return self.proj(out.view(B, -1, H, W)), attn
        B, N, _ = x.shape
        q, k, v = self.qkv(x).view(B, N, self.heads, -1).split(sizes, dim=3)
        out, attn = attend(q, k, v, bias, capture)
        return self.proj(out), attn


class Subsample(nn.Module):
    """(B, h·w, C) -> (B, h'·w', C): the tokens at every other row and column (the first
    included) of the (h, w) grid."""

    def __init__(self, grid: tuple[int, int], conv: bool = False) -> None:
        super().__init__()
        self.grid, self.conv = grid, conv

    def forward(self, x: Tensor) -> Tensor:
        if self.conv:  # (B, C, h, w) -> (B, C, h', w')
            return x[:, :, ::2, ::2].contiguous()
        B, _, C = x.shape
        return x.view(B, *self.grid, C)[:, ::2, ::2].reshape(B, -1, C)


class LeViTAttentionDownsample(nn.Module):
    """The subsample attention: queries from the subsampled tokens, keys and values from all of
    the previous stage's, (B, N_{s-1}, D_{s-1}) -> (B, N_s, D_s) and the probabilities
    (B, heads, N_s, N_{s-1})."""

    def __init__(self, config: LeViTConfig, stage: int, fine: tuple[int, int]) -> None:
        super().__init__()
        D_in, D_out = config.dims[stage - 1], config.dims[stage]
        h, kd, eps, conv = config.down_heads(stage), config.key_dim, config.bn_eps, config.conv
        self.heads, self.key_dim, self.value_dim = h, kd, DOWN_VALUE_RATIO * kd
        self.fine, self.conv = fine, conv
        self.coarse = ((fine[0] - 1) // 2 + 1, (fine[1] - 1) // 2 + 1)
        self.kv = LinearNorm(D_in, h * (kd + self.value_dim), eps, conv)
        self.q = nn.Sequential(
            OrderedDict(down=Subsample(fine, conv), ln=LinearNorm(D_in, h * kd, eps, conv))
        )
        self.proj = nn.Sequential(
            OrderedDict(
                act=activation(config.activation),
                ln=LinearNorm(h * self.value_dim, D_out, eps, conv),
            )
        )
        self.attention_biases = nn.Parameter(torch.zeros(h, fine[0] * fine[1]))

    def forward(self, x: Tensor, capture: bool = False) -> tuple[Tensor, Tensor | None]:
        bias = self.attention_biases[:, bias_index(self.coarse, self.fine, 2).to(x.device)]
        sizes = [self.key_dim, self.value_dim]
        if self.conv:
            B, _, H, W = x.shape
            k, v = self.kv(x).view(B, self.heads, -1, H * W).split(sizes, dim=2)
            q = self.q(x).view(B, self.heads, self.key_dim, -1)
            out, attn = attend_channels(q, k, v, bias, capture)
            return self.proj(out.reshape(B, -1, *self.coarse)), attn
        B, N, _ = x.shape
        k, v = self.kv(x).view(B, N, self.heads, -1).split(sizes, dim=3)
        q = self.q(x).view(B, -1, self.heads, self.key_dim)
        out, attn = attend(q, k, v, bias, capture)
        return self.proj(out), attn


class LeViTMlp(nn.Module):
    """LinearNorm, activation, LinearNorm: (B, N, D) -> (B, N, D)."""

    def __init__(self, dim: int, hidden: int, config: LeViTConfig) -> None:
        super().__init__()
        self.ln1 = LinearNorm(dim, hidden, config.bn_eps, config.conv)
        self.act = activation(config.activation)
        self.ln2 = LinearNorm(hidden, dim, config.bn_eps, config.conv)

    def forward(self, x: Tensor) -> Tensor:
        return self.ln2(self.act(self.ln1(x)))


class LeViTBlock(nn.Module):
    """x + attn(x), then + mlp(·), on one stage's grid."""

    def __init__(self, config: LeViTConfig, stage: int, grid: tuple[int, int]) -> None:
        super().__init__()
        self.attn = LeViTAttention(config, stage, grid)
        self.mlp = LeViTMlp(config.dims[stage], config.mlp_hidden_dims[stage], config)

    def forward(self, x: Tensor, capture: bool = False) -> tuple[Tensor, Tensor | None]:
        a, attn = self.attn(x, capture)
        x = x + a
        return x + self.mlp(x), attn


class LeViTDownsample(nn.Module):
    """The subsample attention (no residual: its output is the new stage's tokens), then
    + mlp(·)."""

    def __init__(self, config: LeViTConfig, stage: int, fine: tuple[int, int]) -> None:
        super().__init__()
        self.attn_downsample = LeViTAttentionDownsample(config, stage, fine)
        D = config.dims[stage]
        self.mlp = LeViTMlp(D, DOWN_MLP_RATIO * D, config)

    @property
    def attn(self) -> LeViTAttentionDownsample:
        return self.attn_downsample

    def forward(self, x: Tensor, capture: bool = False) -> tuple[Tensor, Tensor | None]:
        x, attn = self.attn_downsample(x, capture)
        return x + self.mlp(x), attn


class LeViTStage(nn.Module):
    """A stage: its subsample block (every stage but the first) and its blocks."""

    def __init__(self, config: LeViTConfig, stage: int) -> None:
        super().__init__()
        grids = config.stage_grids()
        self.downsample = LeViTDownsample(config, stage, grids[stage - 1]) if stage else None
        self.blocks = nn.ModuleList(
            LeViTBlock(config, stage, grids[stage]) for _ in range(config.depths[stage])
        )


class LeViTNet(nn.Module):
    """LeViT: ``forward`` gives logits, ``forward_explained`` also each attention layer's
    probabilities (B, heads, N_q, N_k)."""

    model_kind = "levit"

    def __init__(self, config: LeViTConfig) -> None:
        super().__init__()
        config.validate()
        self.config = config
        self.stem = LeViTStem(config)
        self.stages = nn.ModuleList(LeViTStage(config, s) for s in range(config.num_stages))
        D, C = config.dims[-1], config.num_classes
        self.head: nn.Module = NormLinear(D, C, config.bn_eps) if C else nn.Identity()
        self.head_dist: nn.Module | None = (
            (NormLinear(D, C, config.bn_eps) if C else nn.Identity()) if config.distilled else None
        )

    @property
    def num_prefix_tokens(self) -> int:
        return 0

    @property
    def blocks(self) -> list[nn.Module]:
        """Every attention layer's block in order: a stage's subsample block, then its blocks."""
        out: list[nn.Module] = []
        for stage in self.stages:
            if stage.downsample is not None:
                out.append(stage.downsample)
            out += list(stage.blocks)
        return out

    def embed(self, x: Tensor) -> Tensor:
        """(B, C_in, H, W) -> (B, N_0, D_0) row-major ((B, D_0, h, w) in the conv layout);
        ValueError for an input of another grid (the biases are learnt on the trained grid)."""
        x = self.stem(x)
        want = self.config.stage_grids()[0]
        if tuple(x.shape[-2:]) != want:
            H, W = self.config.image_size
            raise ValueError(
                f"a LeViT's attention biases are learnt on a {want[0]}×{want[1]} grid: this "
                f"input gives {x.shape[-2]}×{x.shape[-1]}; analyse it at the model's own input "
                f"size {H}×{W}"
            )
        return x if self.config.conv else x.flatten(2).transpose(1, 2)

    def pool(self, tokens: Tensor) -> Tensor:
        """The mean token (B, D) of the last stage's tokens, in either layout."""
        return tokens.mean(dim=(-2, -1)) if self.config.conv else tokens.mean(dim=1)

    def forward_features(
        self, x: Tensor, capture_attention: bool = False
    ) -> tuple[Tensor, LeViTOutput]:
        """(B, C_in, H, W) -> the last stage's tokens (B, N, D) ((B, D, h, w) in the conv
        layout) and the report."""
        t = self.embed(x)
        report = LeViTOutput(
            logits=t.new_empty(0), attentions=[], stage_grids=self.config.stage_grids()
        )
        for s, block in zip(self.config.layer_stages, self.blocks, strict=True):
            t, attn = block(t, capture=capture_attention)
            report.layer_stages.append(s)
            if attn is not None:
                report.attentions.append(attn)
        return t, report

    def forward_head(self, pooled: Tensor) -> Tensor:
        """(B, D) mean token -> (B, C): the head; distilled, the mean of it and head_dist."""
        if self.head_dist is None:
            return self.head(pooled)
        return (self.head(pooled) + self.head_dist(pooled)) / 2

    def forward(self, x: Tensor) -> Tensor:
        """(B, C_in, H, W) -> (B, num_classes) logits."""
        return self.forward_head(self.pool(self.forward_features(x)[0]))

    def forward_explained(self, x: Tensor, capture_attention: bool = True) -> LeViTOutput:
        """The forward pass that also hands back each attention layer's probabilities."""
        tokens, report = self.forward_features(x, capture_attention)
        report.logits = self.forward_head(self.pool(tokens))
        return report
