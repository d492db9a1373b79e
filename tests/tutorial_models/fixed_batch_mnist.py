"""MNIST ViT that flattens its patches by hand with the training batch size written in: a
Linear over p·p pixels and ``x.view(BATCH_SIZE, ...)`` in forward."""

import torch
from torch import nn

BATCH_SIZE = 64
PATCH = 4


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        a = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, dim=-1)
        return self.proj((a @ v).transpose(1, 2).reshape(b, n, d))


class MnistViT(nn.Module):
    def __init__(self, dim=32, heads=4, depth=2):
        super().__init__()
        self.embed = nn.Linear(PATCH * PATCH, dim)
        self.pos = nn.Parameter(torch.zeros(1, 49, dim))
        self.layers = nn.ModuleList([Attention(dim, heads) for _ in range(depth)])
        self.fc = nn.Linear(dim, 10)

    def forward(self, x):
        x = x.unfold(2, PATCH, PATCH).unfold(3, PATCH, PATCH)
        x = x.contiguous().view(BATCH_SIZE, 49, PATCH * PATCH)
        x = self.embed(x) + self.pos
        for layer in self.layers:
            x = x + layer(x)
        return self.fc(x.mean(1))
