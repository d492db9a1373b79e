"""MNIST ViT: 28×28 gray images, 7×7 patches from a Conv2d, nn.MultiheadAttention blocks
(batch_first), a CLS token and an MLP head of LayerNorm + Linear."""

import torch
from torch import nn


class EncoderBlock(nn.Module):
    def __init__(self, embed_dim, num_heads, mlp_dim):
        super().__init__()
        self.ln1 = nn.LayerNorm(embed_dim)
        self.attn = nn.MultiheadAttention(embed_dim, num_heads, batch_first=True)
        self.ln2 = nn.LayerNorm(embed_dim)
        self.mlp = nn.Sequential(
            nn.Linear(embed_dim, mlp_dim), nn.GELU(), nn.Linear(mlp_dim, embed_dim)
        )

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h)[0]
        return x + self.mlp(self.ln2(x))


class VisionTransformer(nn.Module):
    def __init__(
        self,
        img_size=28,
        patch_size=7,
        in_channels=1,
        embed_dim=16,
        num_heads=4,
        depth=4,
        mlp_dim=64,
        num_classes=10,
    ):
        super().__init__()
        self.patch_embed = nn.Conv2d(
            in_channels, embed_dim, kernel_size=patch_size, stride=patch_size
        )
        num_patches = (img_size // patch_size) ** 2
        self.cls_token = nn.Parameter(torch.randn(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.randn(1, num_patches + 1, embed_dim))
        self.encoder = nn.ModuleList(
            [EncoderBlock(embed_dim, num_heads, mlp_dim) for _ in range(depth)]
        )
        self.mlp_head = nn.Sequential(nn.LayerNorm(embed_dim), nn.Linear(embed_dim, num_classes))

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        cls = self.cls_token.expand(x.size(0), -1, -1)
        x = torch.cat((cls, x), dim=1) + self.pos_embed
        for block in self.encoder:
            x = block(x)
        return self.mlp_head(x[:, 0])
