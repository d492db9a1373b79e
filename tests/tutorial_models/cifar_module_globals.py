"""CIFAR-10 ViT whose hyper-parameters are module-level constants the constructor reads,
nn.TransformerEncoder (pre-norm, GELU) and a CLS token."""

import torch
from torch import nn

IMG_SIZE = 32
PATCH_SIZE = 4
IN_CHANNELS = 3
NUM_CLASSES = 10
EMBED_DIM = 48
NUM_HEADS = 4
NUM_ENCODERS = 2
NUM_PATCHES = (IMG_SIZE // PATCH_SIZE) ** 2


class PatchEmbedding(nn.Module):
    def __init__(self):
        super().__init__()
        self.patcher = nn.Sequential(
            nn.Conv2d(IN_CHANNELS, EMBED_DIM, kernel_size=PATCH_SIZE, stride=PATCH_SIZE),
            nn.Flatten(2),
        )
        self.cls_token = nn.Parameter(torch.randn(1, 1, EMBED_DIM))
        self.position_embeddings = nn.Parameter(torch.randn(1, NUM_PATCHES + 1, EMBED_DIM))

    def forward(self, x):
        cls_token = self.cls_token.expand(x.shape[0], -1, -1)
        x = self.patcher(x).permute(0, 2, 1)
        return torch.cat([cls_token, x], dim=1) + self.position_embeddings


class ViT(nn.Module):
    def __init__(self):
        super().__init__()
        self.embeddings_block = PatchEmbedding()
        encoder_layer = nn.TransformerEncoderLayer(
            d_model=EMBED_DIM,
            nhead=NUM_HEADS,
            dropout=0.0,
            activation="gelu",
            batch_first=True,
            norm_first=True,
        )
        self.encoder_blocks = nn.TransformerEncoder(
            encoder_layer, num_layers=NUM_ENCODERS, enable_nested_tensor=False
        )
        self.mlp_head = nn.Sequential(nn.LayerNorm(EMBED_DIM), nn.Linear(EMBED_DIM, NUM_CLASSES))

    def forward(self, x):
        x = self.embeddings_block(x)
        x = self.encoder_blocks(x)
        return self.mlp_head(x[:, 0, :])
