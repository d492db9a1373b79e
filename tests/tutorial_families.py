"""Model files of the families seen in trained tutorial ViTs, as their authors write them.

Each family is a source the tests write to disk, the name to open, its constructor arguments
and the class of its attention module (whose attention the tests compute by hand from its
input and weights). test_modelcode_tutorials opens each one with vitviz.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from test_modelcode_layouts import FUSED_QKV

# The fused-qkv Attention and pre-norm Block most tutorials write (``heads``, ``qkv``).
ATTENTION = FUSED_QKV.split("class VisionTransformer")[0] + "import torch.nn.functional as F\n"

MNIST_CONV = (
    ATTENTION
    + '''

class MnistViT(nn.Module):
    """Fashion-MNIST: 28×28 gray images, 7×7 patches, a CLS token."""

    def __init__(self, in_channels=1, img_size=28, patch_size=7, dim=32, depth=2, heads=4,
                 num_classes=10):
        super().__init__()
        self.patch_embed = nn.Conv2d(in_channels, dim, kernel_size=patch_size, stride=patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, (img_size // patch_size) ** 2 + 1, dim))
        self.blocks = nn.Sequential(*[Block(dim, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])
'''
)

# One channel, patches cut with unfold and a Linear over p·p inputs, post-norm blocks, no CLS
# token (the head reads the mean of the tokens), and no patch-size argument by a known name.
MNIST_UNFOLD = """
import torch
from torch import nn


class MHSA(nn.Module):
    def __init__(self, d, n_heads):
        super().__init__()
        self.heads = n_heads
        self.d_head = d // n_heads
        self.query = nn.Linear(d, d, bias=False)
        self.key = nn.Linear(d, d, bias=False)
        self.value = nn.Linear(d, d, bias=False)
        self.out = nn.Linear(d, d)

    def split(self, t):
        b, n, _ = t.shape
        return t.view(b, n, self.heads, self.d_head).transpose(1, 2)

    def forward(self, x):
        q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / self.d_head ** 0.5
        weights = torch.softmax(scores, dim=-1)
        out = torch.matmul(weights, v).transpose(1, 2).flatten(2)
        return self.out(out)


class PostNormBlock(nn.Module):
    def __init__(self, d, n_heads):
        super().__init__()
        self.mhsa = MHSA(d, n_heads)
        self.ln1 = nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.ReLU(), nn.Linear(4 * d, d))
        self.ln2 = nn.LayerNorm(d)

    def forward(self, x):
        x = self.ln1(x + self.mhsa(x))
        return self.ln2(x + self.ff(x))


class UnfoldViT(nn.Module):
    def __init__(self, n_channels=1, img=28, patch_len=4, d=24, n_blocks=2, n_heads=3,
                 n_classes=10):
        super().__init__()
        self.p = patch_len
        self.embed = nn.Linear(n_channels * patch_len * patch_len, d)
        self.pos = nn.Parameter(torch.zeros(1, (img // patch_len) ** 2, d))
        self.blocks = nn.ModuleList([PostNormBlock(d, n_heads) for _ in range(n_blocks)])
        self.classifier = nn.Linear(d, n_classes)

    def forward(self, images):
        b, c, h, w = images.shape
        p = self.p
        patches = images.unfold(2, p, p).unfold(3, p, p)  # (b, c, h/p, w/p, p, p)
        patches = patches.permute(0, 2, 3, 1, 4, 5).reshape(b, -1, c * p * p)
        x = self.embed(patches) + self.pos
        for block in self.blocks:
            x = block(x)
        return self.classifier(x.mean(dim=1))
"""

# Post-norm nn.TransformerEncoder without a CLS token: the head reads the mean of the tokens.
CIFAR_ENCODER_MEAN = """
import torch
from torch import nn


class CifarViT(nn.Module):
    def __init__(self, image_size=32, patch_size=4, dim=32, depth=2, heads=4, num_classes=10):
        super().__init__()
        self.to_patches = nn.Conv2d(3, dim, patch_size, patch_size)
        self.pos = nn.Parameter(torch.zeros(1, (image_size // patch_size) ** 2, dim))
        layer = nn.TransformerEncoderLayer(dim, heads, 2 * dim, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.fc = nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.to_patches(x).flatten(2).transpose(1, 2) + self.pos
        return self.fc(self.encoder(x).mean(1))
"""

# The same model returning (logits, attention), probabilities, or log-probabilities.
RETURNS = (
    ATTENTION
    + """

class TupleViT(nn.Module):
    def __init__(self, image_size=32, patch_size=8, dim=32, depth=2, heads=2, num_classes=5,
                 output="tuple"):
        super().__init__()
        self.output = output
        self.patch_embed = nn.Conv2d(3, dim, patch_size, patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, (image_size // patch_size) ** 2 + 1, dim))
        self.blocks = nn.ModuleList([Block(dim, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        features = []
        for block in self.blocks:
            x = block(x)
            features.append(x)
        logits = self.head(self.norm(x)[:, 0])
        if self.output == "tuple":
            return features[-1], logits
        if self.output == "dict":
            return {"features": features[-1], "out": logits}
        if self.output == "pooled":  # (pooled features, logits): two (B, n) tensors
            return self.norm(x)[:, 0], logits
        if self.output == "twins":  # two (B, classes) tensors nothing tells apart
            return logits, 2 * logits
        if self.output == "softmax":
            return F.softmax(logits, dim=-1)
        if self.output == "log_softmax":
            return F.log_softmax(logits, dim=1)
        return logits
"""
)

# A constructor that takes a config object, and the two-line factory that builds it.
CONFIG_OBJECT = (
    ATTENTION
    + """
from dataclasses import dataclass


@dataclass
class ViTConfig:
    image_size: int = 32
    patch_size: int = 8
    dim: int = 32
    depth: int = 2
    heads: int = 2
    num_classes: int = 5


class ConfigViT(nn.Module):
    def __init__(self, config: ViTConfig):
        super().__init__()
        c = config
        self.patch_embed = nn.Conv2d(3, c.dim, c.patch_size, c.patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, c.dim))
        n = (c.image_size // c.patch_size) ** 2
        self.pos_embed = nn.Parameter(torch.zeros(1, n + 1, c.dim))
        self.blocks = nn.ModuleList([Block(c.dim, c.heads) for _ in range(c.depth)])
        self.head = nn.Linear(c.dim, c.num_classes)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        for block in self.blocks:
            x = block(x)
        return self.head(x[:, 0])
"""
)

FACTORY = """
from model import ConfigViT, ViTConfig


def make_vit(depth=2):
    return ConfigViT(ViTConfig(depth=depth))
"""


@dataclass(frozen=True)
class Family:
    key: str
    source: str
    name: str
    args: dict[str, Any]
    attention_class: str  # the attention modules, computed by hand from their input
    depth: int
    heads: int
    prefix: int
    num_classes: int
    channels: int = 3
    image_size: int = 32
    patch: int = 8
    settings: dict[str, Any] = field(default_factory=dict)


FAMILIES = [
    Family("mnist_conv", MNIST_CONV, "MnistViT", {}, "Attention", 2, 4, 1, 10, 1, 28, 7),
    Family("mnist_unfold", MNIST_UNFOLD, "UnfoldViT", {}, "MHSA", 2, 3, 0, 10, 1, 28, 4),
    Family("cifar_encoder_mean", CIFAR_ENCODER_MEAN, "CifarViT", {}, "MultiheadAttention",
           2, 4, 0, 10, 3, 32, 4),
    Family("tuple_output", RETURNS, "TupleViT", {"output": "tuple"}, "Attention", 2, 2, 1, 5),
    Family("dict_output", RETURNS, "TupleViT", {"output": "dict"}, "Attention", 2, 2, 1, 5),
    Family("softmax_output", RETURNS, "TupleViT", {"output": "softmax"}, "Attention", 2, 2, 1, 5),
    Family("log_softmax_output", RETURNS, "TupleViT", {"output": "log_softmax"}, "Attention",
           2, 2, 1, 5),
]  # fmt: skip

# einops Rearrange + Linear over p·p·C inputs (one channel), an image size argument and no
# patch-size argument; and the same model fixing its batch size in forward (``view(64, ...)``).
REARRANGE_LINEAR = (
    ATTENTION
    + """
from einops.layers.torch import Rearrange


class Net(nn.Module):
    def __init__(self, image_size=28, grid=7, dim=32, heads=4, depth=2, num_classes=10):
        super().__init__()
        p = image_size // grid
        self.to_patch = nn.Sequential(
            Rearrange("b c (h p1) (w p2) -> b (h w) (p1 p2 c)", p1=p, p2=p),
            nn.Linear(p * p, dim),
        )
        self.cls = nn.Parameter(torch.randn(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, grid * grid + 1, dim))
        self.layers = nn.ModuleList([Attention(dim, heads) for _ in range(depth)])
        self.out = nn.Linear(dim, num_classes)

    def forward(self, img):
        x = self.to_patch(img)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
        for layer in self.layers:
            x = x + layer(x)
        return self.out(x[:, 0])
"""
)

FIXED_BATCH = REARRANGE_LINEAR.replace(
    "        x = self.to_patch(img)\n",
    "        x = self.to_patch(img)\n        x = x.view(64, 49, -1)\n",
)
