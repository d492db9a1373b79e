"""Multi-head attention written with an explicit loop over the heads: one fused qkv Linear,
the heads split as an axis, then ``for h in range(self.num_heads)`` each head's (B, N, N)
scores and softmax, stacked back; encoder blocks in an nn.Sequential, mean-pooled tokens."""

import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self, dim, num_heads=4):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim**-0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]  # each (B, heads, N, head_dim)
        heads = []
        for h in range(self.num_heads):
            attn = (q[:, h] @ k[:, h].transpose(-2, -1)) * self.scale
            attn = attn.softmax(dim=-1)
            heads.append(attn @ v[:, h])
        out = torch.stack(heads, dim=1).transpose(1, 2).reshape(B, N, C)
        return self.proj(out)


class EncoderBlock(nn.Module):
    def __init__(self, dim, num_heads, mlp_ratio=2.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, num_heads)
        self.norm2 = nn.LayerNorm(dim)
        hidden = int(dim * mlp_ratio)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class LoopViT(nn.Module):
    def __init__(self, image_size=32, patch_size=8, dim=32, depth=2, num_heads=4, num_classes=10):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, kernel_size=patch_size, stride=patch_size)
        self.pos_embed = nn.Parameter(torch.zeros(1, (image_size // patch_size) ** 2, dim))
        self.encoder = nn.Sequential(*[EncoderBlock(dim, num_heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2) + self.pos_embed
        x = self.norm(self.encoder(x))
        return self.fc(x.mean(dim=1))
