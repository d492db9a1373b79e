"""MNIST ViT written step by step: patches cut in Python loops, one Linear per head for q, k
and v, attention computed per image and per head on (N, N) matrices, a softmax head."""

import numpy as np
import torch
from torch import nn


def patchify(images, n_patches):
    n, c, h, w = images.shape
    patches = torch.zeros(n, n_patches**2, h * w * c // n_patches**2)
    size = h // n_patches
    for idx, image in enumerate(images):
        for i in range(n_patches):
            for j in range(n_patches):
                patch = image[:, i * size : (i + 1) * size, j * size : (j + 1) * size]
                patches[idx, i * n_patches + j] = patch.flatten()
    return patches


def positional_embeddings(sequence_length, d):
    result = torch.ones(sequence_length, d)
    for i in range(sequence_length):
        for j in range(d):
            angle = i / (10000 ** (j / d)) if j % 2 == 0 else i / (10000 ** ((j - 1) / d))
            result[i][j] = np.sin(angle) if j % 2 == 0 else np.cos(angle)
    return result


class MSA(nn.Module):
    def __init__(self, d, n_heads=2):
        super().__init__()
        self.n_heads = n_heads
        d_head = d // n_heads
        self.d_head = d_head
        self.q_mappings = nn.ModuleList([nn.Linear(d_head, d_head) for _ in range(n_heads)])
        self.k_mappings = nn.ModuleList([nn.Linear(d_head, d_head) for _ in range(n_heads)])
        self.v_mappings = nn.ModuleList([nn.Linear(d_head, d_head) for _ in range(n_heads)])
        self.softmax = nn.Softmax(dim=-1)

    def forward(self, sequences):
        result = []
        for sequence in sequences:
            seq_result = []
            for head in range(self.n_heads):
                part = sequence[:, head * self.d_head : (head + 1) * self.d_head]
                q = self.q_mappings[head](part)
                k = self.k_mappings[head](part)
                v = self.v_mappings[head](part)
                attention = self.softmax(q @ k.T / (self.d_head**0.5))
                seq_result.append(attention @ v)
            result.append(torch.hstack(seq_result))
        return torch.cat([torch.unsqueeze(r, dim=0) for r in result])


class ViTBlock(nn.Module):
    def __init__(self, hidden_d, n_heads, mlp_ratio=4):
        super().__init__()
        self.norm1 = nn.LayerNorm(hidden_d)
        self.mhsa = MSA(hidden_d, n_heads)
        self.norm2 = nn.LayerNorm(hidden_d)
        self.mlp = nn.Sequential(
            nn.Linear(hidden_d, mlp_ratio * hidden_d),
            nn.GELU(),
            nn.Linear(mlp_ratio * hidden_d, hidden_d),
        )

    def forward(self, x):
        out = x + self.mhsa(self.norm1(x))
        return out + self.mlp(self.norm2(out))


class MyViT(nn.Module):
    def __init__(self, chw=(1, 28, 28), n_patches=7, n_blocks=2, hidden_d=8, n_heads=2, out_d=10):
        super().__init__()
        self.chw = chw
        self.n_patches = n_patches
        self.patch_size = (chw[1] / n_patches, chw[2] / n_patches)
        self.input_d = int(chw[0] * self.patch_size[0] * self.patch_size[1])
        self.linear_mapper = nn.Linear(self.input_d, hidden_d)
        self.class_token = nn.Parameter(torch.rand(1, hidden_d))
        self.register_buffer(
            "positional_embeddings",
            positional_embeddings(n_patches**2 + 1, hidden_d),
            persistent=False,
        )
        self.blocks = nn.ModuleList([ViTBlock(hidden_d, n_heads) for _ in range(n_blocks)])
        self.mlp = nn.Sequential(nn.Linear(hidden_d, out_d), nn.Softmax(dim=-1))

    def forward(self, images):
        n = images.shape[0]
        patches = patchify(images, self.n_patches).to(self.positional_embeddings.device)
        tokens = self.linear_mapper(patches)
        tokens = torch.cat((self.class_token.expand(n, 1, -1), tokens), dim=1)
        out = tokens + self.positional_embeddings.repeat(n, 1, 1)
        for block in self.blocks:
            out = block(out)
        return self.mlp(out[:, 0])
