"""A "ViT from scratch" course model: images cut into patches with unfold, one ``Head`` module per
head (its own query, key and value Linears and a (B, N, N) softmax), the heads' outputs
concatenated before a projection, a CLS token and an MLP classifier on it."""

import torch
import torch.nn.functional as F
from torch import nn


class PatchEmbedding(nn.Module):
    def __init__(self, img_size, patch_size, in_chans, embed_dim):
        super().__init__()
        self.patch_size = patch_size
        self.proj = nn.Linear(in_chans * patch_size * patch_size, embed_dim)
        self.cls_token = nn.Parameter(torch.randn(1, 1, embed_dim) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, (img_size // patch_size) ** 2 + 1, embed_dim))

    def forward(self, x):
        patches = F.unfold(x, self.patch_size, stride=self.patch_size).transpose(1, 2)
        tokens = self.proj(patches)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        return torch.cat([cls, tokens], dim=1) + self.pos_embed


class Head(nn.Module):
    def __init__(self, embed_dim, head_dim, dropout):
        super().__init__()
        self.query = nn.Linear(embed_dim, head_dim)
        self.key = nn.Linear(embed_dim, head_dim)
        self.value = nn.Linear(embed_dim, head_dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        q, k, v = self.query(x), self.key(x), self.value(x)
        scores = torch.matmul(q, k.transpose(1, 2)) / (q.size(-1) ** 0.5)
        weights = self.dropout(F.softmax(scores, dim=-1))
        return torch.matmul(weights, v)


class MultiHeadAttention(nn.Module):
    def __init__(self, embed_dim, num_heads, dropout):
        super().__init__()
        head_dim = embed_dim // num_heads
        self.heads = nn.ModuleList([Head(embed_dim, head_dim, dropout) for _ in range(num_heads)])
        self.output = nn.Linear(embed_dim, embed_dim)

    def forward(self, x):
        return self.output(torch.cat([head(x) for head in self.heads], dim=-1))


class TransformerEncoder(nn.Module):
    def __init__(self, embed_dim, num_heads, mlp_dim, dropout):
        super().__init__()
        self.ln1 = nn.LayerNorm(embed_dim)
        self.attention = MultiHeadAttention(embed_dim, num_heads, dropout)
        self.ln2 = nn.LayerNorm(embed_dim)
        self.mlp = nn.Sequential(
            nn.Linear(embed_dim, mlp_dim),
            nn.GELU(),
            nn.Dropout(dropout),
            nn.Linear(mlp_dim, embed_dim),
        )

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class VisionTransformer(nn.Module):
    def __init__(
        self,
        img_size=32,
        patch_size=4,
        in_chans=3,
        num_classes=10,
        embed_dim=48,
        num_heads=3,
        depth=2,
        mlp_dim=96,
        dropout=0.1,
    ):
        super().__init__()
        self.embedding = PatchEmbedding(img_size, patch_size, in_chans, embed_dim)
        self.encoders = nn.ModuleList(
            [TransformerEncoder(embed_dim, num_heads, mlp_dim, dropout) for _ in range(depth)]
        )
        self.norm = nn.LayerNorm(embed_dim)
        self.classifier = nn.Linear(embed_dim, num_classes)

    def forward(self, x):
        x = self.embedding(x)
        for encoder in self.encoders:
            x = encoder(x)
        return self.classifier(self.norm(x[:, 0]))
