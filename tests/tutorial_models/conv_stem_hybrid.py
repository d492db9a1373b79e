"""A hybrid ViT for small images: a convolutional stem (3×3 conv, BatchNorm, ReLU) before a
stride = kernel patch Conv2d, a CLS token, nn.TransformerEncoder and a softmax at the end."""

import torch
from torch import nn


class HybridViT(nn.Module):
    def __init__(
        self,
        in_channels=3,
        stem_channels=16,
        image_size=32,
        patch_size=4,
        dim=32,
        depth=2,
        heads=4,
        num_classes=10,
    ):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, stem_channels, 3, padding=1),
            nn.BatchNorm2d(stem_channels),
            nn.ReLU(),
        )
        self.patch = nn.Conv2d(stem_channels, dim, patch_size, patch_size)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.zeros(1, (image_size // patch_size) ** 2 + 1, dim))
        layer = nn.TransformerEncoderLayer(
            dim, heads, 2 * dim, dropout=0.0, batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.head = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, num_classes), nn.Softmax(dim=1))

    def forward(self, x):
        x = self.patch(self.stem(x)).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        return self.head(self.encoder(x)[:, 0])
