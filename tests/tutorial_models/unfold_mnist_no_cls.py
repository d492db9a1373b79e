"""Fashion-MNIST ViT: nn.Unfold cuts the patches, a Linear over p·p pixels embeds them, post-norm
blocks with separate query / key / value layers, no CLS token (the head reads the mean)."""

import torch
from torch import nn


class MHSA(nn.Module):
    def __init__(self, d, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.v = nn.Linear(d, d)
        self.o = nn.Linear(d, d)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = (
            m(x).view(b, n, self.n_heads, -1).transpose(1, 2) for m in (self.q, self.k, self.v)
        )
        w = (q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5).softmax(-1)
        return self.o((w @ v).transpose(1, 2).reshape(b, n, d))


class Layer(nn.Module):
    def __init__(self, d, n_heads):
        super().__init__()
        self.attn = MHSA(d, n_heads)
        self.norm1 = nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 2 * d), nn.ReLU(), nn.Linear(2 * d, d))
        self.norm2 = nn.LayerNorm(d)

    def forward(self, x):
        x = self.norm1(x + self.attn(x))
        return self.norm2(x + self.ff(x))


class FashionViT(nn.Module):
    def __init__(self, patch=4, d=32, n_heads=4, n_layers=2, n_classes=10):
        super().__init__()
        self.unfold = nn.Unfold(kernel_size=patch, stride=patch)
        self.embed = nn.Linear(patch * patch, d)
        self.pos = nn.Parameter(torch.zeros(1, (28 // patch) ** 2, d))
        self.layers = nn.ModuleList([Layer(d, n_heads) for _ in range(n_layers)])
        self.head = nn.Linear(d, n_classes)

    def forward(self, x):
        x = self.embed(self.unfold(x).transpose(1, 2)) + self.pos
        for layer in self.layers:
            x = layer(x)
        return self.head(x.mean(dim=1))
