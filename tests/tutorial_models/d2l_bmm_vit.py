"""The textbook ViT: a Conv2d patch embedding, multi-head attention that folds the heads into
the batch, (B·H, N, d), with torch.bmm and a masked softmax, and a LayerNorm + Linear head."""

import math

import torch
from torch import nn


def masked_softmax(X, valid_lens=None):
    if valid_lens is None:
        return nn.functional.softmax(X, dim=-1)
    raise NotImplementedError


def transpose_qkv(X, num_heads):
    X = X.reshape(X.shape[0], X.shape[1], num_heads, -1)
    X = X.permute(0, 2, 1, 3)
    return X.reshape(-1, X.shape[2], X.shape[3])


def transpose_output(X, num_heads):
    X = X.reshape(-1, num_heads, X.shape[1], X.shape[2])
    X = X.permute(0, 2, 1, 3)
    return X.reshape(X.shape[0], X.shape[1], -1)


class DotProductAttention(nn.Module):
    def forward(self, queries, keys, values):
        d = queries.shape[-1]
        scores = torch.bmm(queries, keys.transpose(1, 2)) / math.sqrt(d)
        self.attention_weights = masked_softmax(scores)
        return torch.bmm(self.attention_weights, values)


class MultiHeadAttention(nn.Module):
    def __init__(self, num_hiddens, num_heads, bias=False):
        super().__init__()
        self.num_heads = num_heads
        self.attention = DotProductAttention()
        self.W_q = nn.Linear(num_hiddens, num_hiddens, bias=bias)
        self.W_k = nn.Linear(num_hiddens, num_hiddens, bias=bias)
        self.W_v = nn.Linear(num_hiddens, num_hiddens, bias=bias)
        self.W_o = nn.Linear(num_hiddens, num_hiddens, bias=bias)

    def forward(self, queries, keys, values):
        queries = transpose_qkv(self.W_q(queries), self.num_heads)
        keys = transpose_qkv(self.W_k(keys), self.num_heads)
        values = transpose_qkv(self.W_v(values), self.num_heads)
        output = self.attention(queries, keys, values)
        return self.W_o(transpose_output(output, self.num_heads))


class PatchEmbedding(nn.Module):
    def __init__(self, img_size=96, patch_size=16, num_hiddens=512):
        super().__init__()
        self.num_patches = (img_size // patch_size) ** 2
        self.conv = nn.Conv2d(3, num_hiddens, kernel_size=patch_size, stride=patch_size)

    def forward(self, X):
        return self.conv(X).flatten(2).transpose(1, 2)


class ViTBlock(nn.Module):
    def __init__(self, num_hiddens, mlp_num_hiddens, num_heads, use_bias=False):
        super().__init__()
        self.ln1 = nn.LayerNorm(num_hiddens)
        self.attention = MultiHeadAttention(num_hiddens, num_heads, use_bias)
        self.ln2 = nn.LayerNorm(num_hiddens)
        self.mlp = nn.Sequential(
            nn.Linear(num_hiddens, mlp_num_hiddens),
            nn.GELU(),
            nn.Linear(mlp_num_hiddens, num_hiddens),
        )

    def forward(self, X):
        X = X + self.attention(*([self.ln1(X)] * 3))
        return X + self.mlp(self.ln2(X))


class ViT(nn.Module):
    def __init__(
        self,
        img_size=96,
        patch_size=16,
        num_hiddens=512,
        mlp_num_hiddens=2048,
        num_heads=8,
        num_blks=2,
        use_bias=False,
        num_classes=10,
    ):
        super().__init__()
        self.patch_embedding = PatchEmbedding(img_size, patch_size, num_hiddens)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, num_hiddens))
        num_steps = self.patch_embedding.num_patches + 1
        self.pos_embedding = nn.Parameter(torch.randn(1, num_steps, num_hiddens))
        self.blks = nn.Sequential()
        for i in range(num_blks):
            self.blks.add_module(
                f"{i}", ViTBlock(num_hiddens, mlp_num_hiddens, num_heads, use_bias)
            )
        self.head = nn.Sequential(nn.LayerNorm(num_hiddens), nn.Linear(num_hiddens, num_classes))

    def forward(self, X):
        X = self.patch_embedding(X)
        X = torch.cat((self.cls_token.expand(X.shape[0], -1, -1), X), 1)
        X = X + self.pos_embedding
        for blk in self.blks:
            X = blk(X)
        return self.head(X[:, 0])
