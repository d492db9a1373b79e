"""A compact ViT using F.scaled_dot_product_attention, post-norm residual blocks, a learned
position table and mean pooling (no CLS token)."""

import torch
import torch.nn.functional as F
from torch import nn


class MHSA(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).unbind(2)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        return self.out(y.transpose(1, 2).reshape(b, n, d))


class PostNormBlock(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.attn = MHSA(dim, heads)
        self.norm1 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
        self.norm2 = nn.LayerNorm(dim)

    def forward(self, x):
        x = self.norm1(x + self.attn(x))
        return self.norm2(x + self.mlp(x))


class TinyViT(nn.Module):
    def __init__(self, image_size=32, patch_size=4, dim=32, depth=2, heads=4, num_classes=10):
        super().__init__()
        self.embed = nn.Conv2d(3, dim, patch_size, patch_size)
        self.pos = nn.Parameter(torch.zeros(1, (image_size // patch_size) ** 2, dim))
        self.blocks = nn.ModuleList([PostNormBlock(dim, heads) for _ in range(depth)])
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.embed(x).flatten(2).transpose(1, 2) + self.pos
        for block in self.blocks:
            x = block(x)
        return self.head(x.mean(1))
