"""TNT: vitviz's Transformer in Transformer (Han et al. 2021), a kind beside the ViT (DESIGN §3).

Image -> per patch a sub-grid of pixel tokens (``PixelEmbed``: a 7×7 stride-4 Conv2d, on each
patch alone or, ``legacy``, on the whole image, plus ``pixel_pos``) -> [CLS] + the patch tokens
(LayerNorm -> Linear -> LayerNorm of each patch's pixel tokens) + ``patch_pos`` -> blocks, each
an inner transformer block over every patch's pixel tokens, the patch's pixel tokens projected
and added to its patch token, then an outer transformer block over [CLS, patches] -> the final
LayerNorm and the head on the CLS token (or the mean of the patches). Module names are timm's,
so a timm state dict is this network's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from vitviz.kinds.tnt.config import TNTConfig


@dataclass
class TNTOutput:
    """What one forward pass reports, blocks in order."""

    logits: Tensor  # (B, C); without a head what the head would read
    attentions: list[Tensor]  # per block (B, heads, 1 + N, 1 + N): the outer attention
    inner: list[Tensor]  # per block (B·N, inner_heads, n, n): each patch's pixel tokens


class TNTAttention(nn.Module):
    """(B, N, C) -> (B, N, C) and the probabilities (B, heads, N, N): q and k from one Linear
    (``qk``), v from another, softmax(q·kᵀ / √d)·v per head, the output projection."""

    def __init__(self, dim: int, heads: int, bias: bool) -> None:
        super().__init__()
        self.heads = heads
        self.head_dim = dim // heads
        self.scale = self.head_dim**-0.5
        self.qk = nn.Linear(dim, 2 * dim, bias=bias)
        self.v = nn.Linear(dim, dim, bias=bias)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        B, N, C = x.shape
        q, k = self.qk(x).reshape(B, N, 2, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        v = self.v(x).reshape(B, N, self.heads, self.head_dim).transpose(1, 2)
        attn = ((q @ k.transpose(-2, -1)) * self.scale).softmax(dim=-1)  # timm's order
        out = (attn @ v).transpose(1, 2).reshape(B, N, C)
        return self.proj(out), attn


class TNTMlp(nn.Module):
    """fc1 -> GELU -> fc2 (timm's ``Mlp``)."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.act(self.fc1(x)))


class TNTBlock(nn.Module):
    """(pixel tokens (B·N, n, c), tokens (B, 1 + N, C)) -> (pixel tokens, tokens, the outer
    probabilities (B, heads, 1 + N, 1 + N), the inner ones (B·N, inner_heads, n, n))."""

    def __init__(self, config: TNTConfig) -> None:
        super().__init__()
        c, C, eps = config.inner_dim, config.embed_dim, config.norm_eps
        n = config.num_pixels
        self.legacy = config.legacy
        self.norm_in = nn.LayerNorm(c, eps=eps)
        self.attn_in = TNTAttention(c, config.inner_heads, config.qkv_bias)
        self.norm_mlp_in = nn.LayerNorm(c, eps=eps)
        self.mlp_in = TNTMlp(c, 4 * c)
        if config.legacy:  # a LayerNorm per pixel token, a Linear with a bias
            self.norm1_proj = nn.LayerNorm(c, eps=eps)
            self.proj = nn.Linear(n * c, C)
            self.norm2_proj: nn.Module | None = None
        else:  # a LayerNorm over the patch's pixel tokens together, a Linear, a LayerNorm
            self.norm1_proj = nn.LayerNorm(n * c, eps=eps)
            self.proj = nn.Linear(n * c, C, bias=False)
            self.norm2_proj = nn.LayerNorm(C, eps=eps)
        self.norm_out = nn.LayerNorm(C, eps=eps)
        self.attn_out = TNTAttention(C, config.heads[0], config.qkv_bias)
        self.norm_mlp = nn.LayerNorm(C, eps=eps)
        self.mlp = TNTMlp(C, int(C * config.mlp_ratio))

    @property
    def norm1(self) -> nn.Module:
        """The CAM family's ``norm1`` (DESIGN §5): the outer attention's LayerNorm."""
        return self.norm_out

    @property
    def norm2(self) -> nn.Module:
        """The CAM family's ``norm2``: the outer MLP's LayerNorm."""
        return self.norm_mlp

    def pixels_to_patch(self, pixels: Tensor, patches: int) -> Tensor:
        """(B·N, n, c) -> (B, N, C): what the block adds to each patch token."""
        B = pixels.shape[0] // patches
        if self.norm2_proj is None:
            return self.proj(self.norm1_proj(pixels).reshape(B, patches, -1))
        return self.norm2_proj(self.proj(self.norm1_proj(pixels.reshape(B, patches, -1))))

    def forward(self, pixels: Tensor, tokens: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        out, inner = self.attn_in(self.norm_in(pixels))
        pixels = pixels + out
        pixels = pixels + self.mlp_in(self.norm_mlp_in(pixels))
        added = self.pixels_to_patch(pixels, tokens.shape[1] - 1)
        tokens = torch.cat([tokens[:, :1], tokens[:, 1:] + added], dim=1)
        out, attn = self.attn_out(self.norm_out(tokens))
        tokens = tokens + out
        return pixels, tokens + self.mlp(self.norm_mlp(tokens)), attn, inner


class PixelEmbed(nn.Module):
    """(B, C_in, H, W) -> (B·N, n, c): each patch's pixel tokens row-major on its sub-grid,
    patches row-major (timm's ``pixel_embed``; its ``proj`` the 7×7 conv)."""

    def __init__(self, config: TNTConfig) -> None:
        super().__init__()
        self.config = config
        s = config.first_stride
        self.proj = nn.Conv2d(config.in_channels, config.inner_dim, 7, stride=s, padding=3)

    def forward(self, x: Tensor, pixel_pos: Tensor) -> Tensor:
        cfg = self.config
        B, C = x.shape[:2]
        p, (n, m), N = cfg.patch_size, cfg.pixel_grid, cfg.grid[0] * cfg.grid[1]
        if cfg.legacy:  # the conv over the image, its output cut into n×m cells
            x = nn.functional.unfold(self.proj(x), (n, m), stride=(n, m))
            x = x.transpose(1, 2).reshape(B * N, cfg.inner_dim, n, m)
        else:  # each patch convolved alone (zero padding at its own border)
            x = nn.functional.unfold(x, (p, p), stride=(p, p))
            x = self.proj(x.transpose(1, 2).reshape(B * N, C, p, p))
        x = x + pixel_pos
        return x.reshape(B * N, cfg.inner_dim, -1).transpose(1, 2)


class TNT(nn.Module):
    """vitviz's TNT; ``forward`` (B, C, H, W) -> (B, classes) (without a head: the pooled
    features the head would read)."""

    model_kind = "tnt"

    def __init__(self, config: TNTConfig) -> None:
        super().__init__()
        config.validate()
        self.config = config
        c, C, eps = config.inner_dim, config.embed_dim, config.norm_eps
        n, N = config.num_pixels, config.grid[0] * config.grid[1]
        self.pixel_embed = PixelEmbed(config)
        self.norm1_proj = nn.LayerNorm(n * c, eps=eps)
        self.proj = nn.Linear(n * c, C)
        self.norm2_proj = nn.LayerNorm(C, eps=eps)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, C))
        self.patch_pos = nn.Parameter(torch.zeros(1, N + 1, C))
        self.pixel_pos = nn.Parameter(torch.zeros(1, c, *config.pixel_grid))
        self.blocks = nn.ModuleList(TNTBlock(config) for _ in range(config.depths[0]))
        self.norm = nn.LayerNorm(C, eps=eps)
        self.head = nn.Linear(C, config.num_classes) if config.num_classes else None

    def embed(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """(B, C, H, W) -> (pixel tokens (B·N, n, c), tokens (B, 1 + N, C))."""
        B = x.shape[0]
        N = self.config.grid[0] * self.config.grid[1]
        pixels = self.pixel_embed(x, self.pixel_pos)
        patches = self.norm2_proj(self.proj(self.norm1_proj(pixels.reshape(B, N, -1))))
        tokens = torch.cat([self.cls_token.expand(B, -1, -1), patches], dim=1)
        return pixels, tokens + self.patch_pos

    def forward_head(self, tokens: Tensor) -> Tensor:
        """(B, 1 + N, C) last-block tokens -> logits: the final norm, the CLS token (or the
        mean of the patches), the head."""
        x = self.norm(tokens)
        x = x[:, 0] if self.config.global_pool == "token" else x[:, 1:].mean(dim=1)
        return x if self.head is None else self.head(x)

    def forward_explained(self, x: Tensor) -> TNTOutput:
        pixels, tokens = self.embed(x)
        attentions, inner = [], []
        for block in self.blocks:
            pixels, tokens, attn, attn_in = block(pixels, tokens)
            attentions.append(attn)
            inner.append(attn_in)
        return TNTOutput(self.forward_head(tokens), attentions, inner)

    def forward(self, x: Tensor) -> Tensor:
        return self.forward_explained(x).logits
