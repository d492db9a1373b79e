"""A ViT configured by a dataclass: ``ViT(cfg: ViTConfig)``, as nanoGPT-style code does."""

from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class ViTConfig:
    image_size: int = 32
    patch_size: int = 8
    n_embd: int = 32
    n_head: int = 2
    n_layer: int = 2
    num_classes: int = 10


class Block(nn.Module):
    def __init__(self, cfg: ViTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd)
        self.attn = nn.MultiheadAttention(cfg.n_embd, cfg.n_head, batch_first=True)
        self.ln_2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.n_embd, 4 * cfg.n_embd), nn.GELU(), nn.Linear(4 * cfg.n_embd, cfg.n_embd)
        )

    def forward(self, x):
        h = self.ln_1(x)
        x = x + self.attn(h, h, h)[0]
        return x + self.mlp(self.ln_2(x))


class ViT(nn.Module):
    def __init__(self, cfg: ViTConfig):
        super().__init__()
        n = (cfg.image_size // cfg.patch_size) ** 2
        self.wpe = nn.Parameter(torch.zeros(1, n + 1, cfg.n_embd))
        self.patch = nn.Conv2d(3, cfg.n_embd, cfg.patch_size, cfg.patch_size)
        self.cls = nn.Parameter(torch.zeros(1, 1, cfg.n_embd))
        self.h = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)])
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.head = nn.Linear(cfg.n_embd, cfg.num_classes)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.wpe
        for block in self.h:
            x = block(x)
        return self.head(self.ln_f(x)[:, 0])
