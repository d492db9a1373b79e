"""XcitModel: vitviz's XCiT (timm's ``Xcit``, eval mode), the class-attention blocks' attention
captured in the class-attention layout (``vitviz.blocks.class_attention``).

Forward pass, x (B, C, H, W), P = gh·gw patches, D width::

    p = stem(x) + fourier(gh, gw)                               (B, P, D)
    XCA block, ``xca_depth`` of them:
        p = p + γ1 · XCA(norm1(p));  p = p + γ3 · LPI(norm3(p));  p = p + γ2 · mlp(norm2(p))
    t = [cls_token, p]
    class-attention block, ``depth`` of them:
        u = norm1(t);  t = t + γ1 · [CA(u), u_patches]
        t = norm2(t) (tokens_norm) or [norm2(t_cls), t_patches]
        t = t + [γ2 · mlp(t_cls), t_patches]                    (the patches doubled, as timm)
    logits = head(norm(t)[:, 0])

XCA, per head with d = D / H channels: q̂, k̂ = q, k L2-normalised over the tokens,
A = softmax_channels(τ_h · q̂ k̂ᵀ) (d × d), out = A v: channel attention, no token-to-token
map. Its (B, H, d, d) matrices are kept only for the library check (``forward_library``).

The class-attention blocks' attention is captured by ``ClassAttention``: (B, H, N, N)
over [CLS, patches] with the CLS row and identity below (a patch's update in these blocks is its
own: no token mixing). The analysis's layers are these blocks only.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vitviz.blocks.class_attention import ClassAttention
from vitviz.blocks.layers import Mlp
from vitviz.blocks.vit import ViTOutput, run_blocks
from vitviz.kinds.xcit.config import XcitConfig


def _conv_bn(c_in: int, c_out: int) -> nn.Sequential:
    """3 × 3 stride-2 convolution (no bias), BatchNorm: (B, c_in, h, w) -> (B, c_out, h/2, w/2)."""
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, kernel_size=3, stride=2, padding=1, bias=False),
        nn.BatchNorm2d(c_out),
    )


class ConvStem(nn.Module):
    """(B, C, H, W) -> (B, P, D) tokens row-major and the grid (H/p, W/p); p = 2^stages."""

    def __init__(self, config: XcitConfig) -> None:
        super().__init__()
        D, stages = config.dim, int(math.log2(config.patch_size))
        widths = [config.in_channels] + [D // 2 ** (stages - 1 - i) for i in range(stages)]
        layers: list[nn.Module] = []
        for i in range(stages):
            if i:
                layers.append(nn.GELU())
            layers.append(_conv_bn(widths[i], widths[i + 1]))
        self.proj = nn.Sequential(*layers)
        self.patch_size = config.patch_size

    def forward(self, x: Tensor) -> tuple[Tensor, tuple[int, int]]:
        p = self.patch_size
        if x.shape[-2] % p or x.shape[-1] % p:
            raise ValueError(f"input {x.shape[-2]}×{x.shape[-1]} is not divisible by the patch {p}")
        x = self.proj(x)
        return x.flatten(2).transpose(1, 2), (x.shape[2], x.shape[3])


class FourierPositions(nn.Module):
    """(gh, gw) -> (1, P, D): sin/cos of the row and column (1..g, over g + 1e-6, times 2π) at
    ``pos_hidden`` frequencies 10000^(2⌊i/2⌋/hidden), rows then columns, through a 1 × 1 conv."""

    def __init__(self, config: XcitConfig) -> None:
        super().__init__()
        self.hidden = config.pos_hidden
        self.token_projection = nn.Conv2d(2 * self.hidden, config.dim, kernel_size=1)

    def forward(self, grid: tuple[int, int]) -> Tensor:
        gh, gw = grid
        w = self.token_projection.weight
        y = torch.arange(1, gh + 1, device=w.device, dtype=torch.float32)[:, None].repeat(1, gw)
        x = torch.arange(1, gw + 1, device=w.device, dtype=torch.float32)[None, :].repeat(gh, 1)
        # the last row (column) + 1e-6 in float32, as timm rounds it: the same bits
        y = y / (y[-1:, :] + 1e-6) * (2 * math.pi)
        x = x / (x[:, -1:] + 1e-6) * (2 * math.pi)
        i = torch.arange(self.hidden, device=w.device, dtype=torch.float32)
        freq = 10000.0 ** (2 * torch.div(i, 2, rounding_mode="floor") / self.hidden)

        def waves(t: Tensor) -> Tensor:  # (gh, gw) -> (gh, gw, hidden): sin, cos interleaved
            a = t[..., None] / freq
            return torch.stack([a[..., 0::2].sin(), a[..., 1::2].cos()], dim=-1).flatten(-2)

        # (1, 2h, gh, gw) with timm's strides (the convolution's summation order follows them)
        pos = torch.cat([waves(y), waves(x)], dim=-1)[None].permute(0, 3, 1, 2)
        return self.token_projection(pos.to(w.dtype)).flatten(2).transpose(1, 2)


class CrossCovarianceAttention(nn.Module):
    """XCA: (B, P, D) -> (B, P, D), and the (B, H, d, d) channel attention."""

    def __init__(self, config: XcitConfig) -> None:
        super().__init__()
        self.heads = config.heads
        self.temperature = nn.Parameter(torch.ones(config.heads, 1, 1))
        self.qkv = nn.Linear(config.dim, 3 * config.dim, bias=config.qkv_bias)
        self.proj = nn.Linear(config.dim, config.dim)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        B, P, D = x.shape
        qkv = self.qkv(x).reshape(B, P, 3, self.heads, D // self.heads).permute(2, 0, 3, 4, 1)
        q, k, v = qkv.unbind(0)  # (B, H, d, P)
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
        a = ((q @ k.transpose(-2, -1)) * self.temperature).softmax(dim=-1)  # (B, H, d, d)
        out = (a @ v).permute(0, 3, 1, 2).reshape(B, P, D)
        return self.proj(out), a


class LocalPatchInteraction(nn.Module):
    """LPI: (B, P, D) on a (gh, gw) grid -> (B, P, D): 3 × 3 depthwise conv, GELU, BatchNorm,
    3 × 3 depthwise conv."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(dim, dim, kernel_size=3, padding=1, groups=dim)
        self.act = nn.GELU()
        self.bn = nn.BatchNorm2d(dim)
        self.conv2 = nn.Conv2d(dim, dim, kernel_size=3, padding=1, groups=dim)

    def forward(self, x: Tensor, grid: tuple[int, int]) -> Tensor:
        B, P, D = x.shape
        x = x.transpose(1, 2).reshape(B, D, *grid)
        x = self.conv2(self.bn(self.act(self.conv1(x))))
        return x.reshape(B, D, P).transpose(1, 2)


class XcaBlock(nn.Module):
    """(B, P, D) patches -> the same, and the block's (B, H, d, d) channel attention."""

    def __init__(self, config: XcitConfig) -> None:
        super().__init__()
        D, eps, eta = config.dim, config.norm_eps, float(config.layer_scale_init or 1.0)
        self.norm1 = nn.LayerNorm(D, eps=eps)
        self.attn = CrossCovarianceAttention(config)
        self.norm3 = nn.LayerNorm(D, eps=eps)
        self.local_mp = LocalPatchInteraction(D)
        self.norm2 = nn.LayerNorm(D, eps=eps)
        self.mlp = Mlp(config)
        self.gamma1 = nn.Parameter(torch.full((D,), eta))
        self.gamma3 = nn.Parameter(torch.full((D,), eta))
        self.gamma2 = nn.Parameter(torch.full((D,), eta))

    def forward(self, x: Tensor, grid: tuple[int, int]) -> tuple[Tensor, Tensor]:
        y, a = self.attn(self.norm1(x))
        x = x + self.gamma1 * y
        x = x + self.gamma3 * self.local_mp(self.norm3(x), grid)
        return x + self.gamma2 * self.mlp(self.norm2(x)), a


class XcitClassBlock(nn.Module):
    """(B, 1 + P, D) [CLS, patches] -> the same: XCiT's class-attention block (see the module
    docstring), and with ``capture`` the class-attention layout's (B, H, N, N) attention, else
    None."""

    def __init__(self, config: XcitConfig) -> None:
        super().__init__()
        D, eps, eta = config.dim, config.norm_eps, float(config.layer_scale_init or 1.0)
        self.norm1 = nn.LayerNorm(D, eps=eps)
        self.attn = ClassAttention(config)
        self.norm2 = nn.LayerNorm(D, eps=eps)
        self.mlp = Mlp(config)
        self.gamma1 = nn.Parameter(torch.full((D,), eta))
        self.gamma2 = nn.Parameter(torch.full((D,), eta))
        self.tokens_norm = config.tokens_norm

    def forward(self, x: Tensor, capture: bool = False) -> tuple[Tensor, Tensor | None]:
        u = self.norm1(x)
        y, attn = self.attn(u, capture=capture)
        x = x + self.gamma1 * torch.cat([y, u[:, 1:]], dim=1)
        if self.tokens_norm:
            x = self.norm2(x)
        else:
            x = torch.cat([self.norm2(x[:, :1]), x[:, 1:]], dim=1)
        cls = self.gamma2 * self.mlp(x[:, :1])
        return x + torch.cat([cls, x[:, 1:]], dim=1), attn


class XcitModel(nn.Module):
    """vitviz's XCiT: ``xca_blocks`` (channel attention), then ``blocks`` (class attention: the
    analysis's layers; token Grad-CAM reads the last one's first LayerNorm)."""

    model_kind = "xcit"  # vitviz.kinds: the XCiT kind explains it

    def __init__(self, config: XcitConfig) -> None:
        super().__init__()
        config.validate()
        self.config = config
        D = config.dim
        self.patch_embed = ConvStem(config)
        self.pos_embed = FourierPositions(config)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, D))
        self.xca_blocks = nn.ModuleList(XcaBlock(config) for _ in range(config.xca_depth))
        self.blocks = nn.ModuleList(XcitClassBlock(config) for _ in range(config.depth))
        self.norm = nn.LayerNorm(D, eps=config.norm_eps)
        C = config.num_classes
        self.head = nn.Linear(D, C) if C else nn.Identity()

    @property
    def num_prefix_tokens(self) -> int:
        return 1

    def patches(self, x: Tensor) -> tuple[Tensor, tuple[int, int], list[Tensor]]:
        """(B, C, H, W) -> the patches after the XCA blocks (B, P, D), the grid, and each XCA
        block's (B, H, d, d) channel attention."""
        p, grid = self.patch_embed(x)
        p = p + self.pos_embed(grid)
        channel: list[Tensor] = []
        for block in self.xca_blocks:
            p, a = block(p, grid)
            channel.append(a)
        return p, grid, channel

    def forward_explained(
        self,
        x: Tensor,
        capture_attention: bool = True,
        hidden_states: bool = False,
        attention_sink: Callable[[int, Tensor], None] | None = None,
        recompute_blocks: bool = False,
    ) -> ViTOutput:
        """Logits (B, C) and each class-attention block's attention L × (B, H, 1 + P, 1 + P)
        (or handed to ``attention_sink``), their outputs L × (B, 1 + P, D) when asked."""
        p, grid, _ = self.patches(x)
        tokens = torch.cat([self.cls_token.expand(p.shape[0], -1, -1), p], dim=1)
        tokens, attentions, hidden = run_blocks(
            self.blocks, tokens, capture_attention, hidden_states, attention_sink, recompute_blocks
        )
        return ViTOutput(self.head(self.norm(tokens)[:, 0]), attentions, hidden, grid, 1)

    def forward_library(self, x: Tensor) -> tuple[Tensor, list[Tensor]]:
        """Logits and timm's attention shapes: each XCA block's (B, H, d, d), then each
        class-attention block's (B, H, 1, 1 + P)."""
        _, _, channel = self.patches(x)
        out = self.forward_explained(x, capture_attention=True)
        return out.logits, [*channel, *(a[:, :, :1] for a in out.attentions)]

    def forward(self, x: Tensor) -> Tensor:
        return self.forward_explained(x, capture_attention=False).logits
