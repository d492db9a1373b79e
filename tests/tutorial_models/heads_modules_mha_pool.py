"""One-head attention modules in the encoder (each ``SelfAttentionHead`` with its own q, k, v,
held in a ModuleList and concatenated), and an nn.MultiheadAttention elsewhere: a learned query
pools the tokens for the classifier (attention pooling, one query: not a square map)."""

import torch
from torch import nn


class SelfAttentionHead(nn.Module):
    def __init__(self, d_model, d_head):
        super().__init__()
        self.q = nn.Linear(d_model, d_head, bias=False)
        self.k = nn.Linear(d_model, d_head, bias=False)
        self.v = nn.Linear(d_model, d_head, bias=False)
        self.softmax = nn.Softmax(dim=-1)

    def forward(self, x):
        attn = self.softmax(self.q(x) @ self.k(x).transpose(-2, -1) * self.q.out_features**-0.5)
        return attn @ self.v(x)


class EncoderLayer(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.heads = nn.ModuleList(
            [SelfAttentionHead(d_model, d_model // n_heads) for _ in range(n_heads)]
        )
        self.proj = nn.Linear(d_model, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.ff = nn.Sequential(
            nn.Linear(d_model, 2 * d_model), nn.ReLU(), nn.Linear(2 * d_model, d_model)
        )
        self.norm2 = nn.LayerNorm(d_model)

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.proj(torch.cat([head(h) for head in self.heads], dim=-1))
        return x + self.ff(self.norm2(x))


class PooledViT(nn.Module):
    def __init__(self, img_size=32, patch_size=8, d_model=32, n_heads=2, n_layers=2, n_classes=4):
        super().__init__()
        self.to_tokens = nn.Conv2d(3, d_model, patch_size, stride=patch_size)
        self.position = nn.Parameter(torch.randn(1, (img_size // patch_size) ** 2, d_model) * 0.02)
        self.layers = nn.ModuleList([EncoderLayer(d_model, n_heads) for _ in range(n_layers)])
        self.pool_query = nn.Parameter(torch.randn(1, 1, d_model) * 0.02)
        self.pool = nn.MultiheadAttention(d_model, num_heads=4, batch_first=True)
        self.out = nn.Linear(d_model, n_classes)

    def forward(self, x):
        x = self.to_tokens(x).flatten(2).transpose(1, 2) + self.position
        for layer in self.layers:
            x = layer(x)
        pooled, _ = self.pool(self.pool_query.expand(x.shape[0], -1, -1), x, x)
        return self.out(pooled[:, 0])
