"""Model files in the common tutorial layouts, written the way their authors write them.

Each layout is a Python source the tests write to disk, the name to open in it, its constructor
arguments, the class of its attention module and how to compute that module's attention by hand
from its own weights. The other test_modelcode_* modules import LAYOUTS and the helpers here.
"""

from __future__ import annotations

import importlib.util
import math
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor, nn

FUSED_QKV = '''
"""A ViT from a tutorial: fused qkv, explicit softmax, Conv2d patches, CLS token."""
import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = (q @ k.transpose(-2, -1)) * self.scale
        attn = attn.softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(B, N, C)
        return self.proj(x)


class Block(nn.Module):
    def __init__(self, dim, heads, mlp_ratio=2):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(
            nn.Linear(dim, dim * mlp_ratio), nn.GELU(), nn.Linear(dim * mlp_ratio, dim)
        )

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class VisionTransformer(nn.Module):
    def __init__(self, image_size=32, patch_size=8, num_classes=5, dim=32, depth=3, heads=2):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, kernel_size=patch_size, stride=patch_size)
        n = (image_size // patch_size) ** 2
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, n + 1, dim))
        self.blocks = nn.ModuleList([Block(dim, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat([cls, x], dim=1) + self.pos_embed
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x)[:, 0])
'''

SEPARATE_QKV = '''
"""vit-pytorch style: einops, separate query/key/value layers, a sine-cosine table built in a
loop, one LayerNorm shared by both sub-blocks, an MLP without activation, Linear patches."""
import math

import torch
from einops import rearrange, repeat
from einops.layers.torch import Rearrange
from torch import nn


def sincos_table(n_positions, dim):
    table = torch.zeros(n_positions, dim)
    for pos in range(n_positions):
        for i in range(0, dim, 2):
            angle = pos / (10000 ** (i / dim))
            table[pos, i] = math.sin(angle)
            table[pos, i + 1] = math.cos(angle)
    return table


class SelfAttention(nn.Module):
    def __init__(self, dim, heads, dim_head):
        super().__init__()
        inner = heads * dim_head
        self.heads = heads
        self.scale = dim_head ** -0.5
        self.query = nn.Linear(dim, inner, bias=False)
        self.key = nn.Linear(dim, inner, bias=False)
        self.value = nn.Linear(dim, inner, bias=False)
        self.softmax = nn.Softmax(dim=-1)
        self.out = nn.Linear(inner, dim)

    def forward(self, x):
        q = rearrange(self.query(x), "b n (h d) -> b h n d", h=self.heads)
        k = rearrange(self.key(x), "b n (h d) -> b h n d", h=self.heads)
        v = rearrange(self.value(x), "b n (h d) -> b h n d", h=self.heads)
        dots = torch.matmul(q, k.transpose(-1, -2)) * self.scale
        attn = self.softmax(dots)
        out = torch.matmul(attn, v)
        return self.out(rearrange(out, "b h n d -> b n (h d)"))


class Layer(nn.Module):
    def __init__(self, dim, heads, dim_head, mlp_dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)  # the same norm before attention and before the MLP
        self.attn = SelfAttention(dim, heads, dim_head)
        self.ff = nn.Sequential(nn.Linear(dim, mlp_dim), nn.Linear(mlp_dim, dim))

    def forward(self, x):
        x = x + self.attn(self.norm(x))
        return x + self.ff(self.norm(x))


class ViT(nn.Module):
    def __init__(self, *, image_size, patch_size, num_classes, dim, depth, heads, dim_head=8,
                 mlp_dim=64):
        super().__init__()
        n = (image_size // patch_size) ** 2
        self.to_patch_embedding = nn.Sequential(
            Rearrange("b c (h p1) (w p2) -> b (h w) (p1 p2 c)", p1=patch_size, p2=patch_size),
            nn.Linear(3 * patch_size * patch_size, dim),
        )
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim))
        self.register_buffer("pos_embedding", sincos_table(n + 1, dim)[None], persistent=False)
        self.layers = nn.ModuleList(
            [Layer(dim, heads, dim_head, mlp_dim) for _ in range(depth)]
        )
        self.mlp_head = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, num_classes))

    def forward(self, img):
        x = self.to_patch_embedding(img)
        b, n, _ = x.shape
        cls_tokens = repeat(self.cls_token, "1 1 d -> b 1 d", b=b)
        x = torch.cat((cls_tokens, x), dim=1) + self.pos_embedding[:, : n + 1]
        for layer in self.layers:
            x = layer(x)
        return self.mlp_head(x[:, 0])
'''

MULTIHEAD = '''
"""CLIP-like blocks around nn.MultiheadAttention, called with need_weights=False."""
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.ln_1 = nn.LayerNorm(width)
        self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
        self.ln_2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(),
                                 nn.Linear(2 * width, width))

    def forward(self, x):
        h = self.ln_1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.ln_2(x))


class ViT(nn.Module):
    def __init__(self, img_size=32, patch=8, n_classes=3, width=32, layers=2, heads=4):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, kernel_size=patch, stride=patch, bias=False)
        self.class_embedding = nn.Parameter(torch.zeros(width))
        self.positional_embedding = nn.Parameter(torch.zeros((img_size // patch) ** 2 + 1, width))
        self.ln_pre = nn.LayerNorm(width)
        self.transformer = nn.Sequential(*[Block(width, heads) for _ in range(layers)])
        self.ln_post = nn.LayerNorm(width)
        self.head = nn.Linear(width, n_classes)

    def forward(self, x):
        x = self.conv1(x).flatten(2).permute(0, 2, 1)
        cls = self.class_embedding.expand(x.shape[0], 1, -1)
        x = torch.cat([cls, x], dim=1) + self.positional_embedding
        x = self.transformer(self.ln_pre(x))
        features = self.ln_post(x[:, 0])
        return self.head(features), features
'''

ENCODER_BATCH_FIRST = '''
"""nn.TransformerEncoder of post-norm nn.TransformerEncoderLayer blocks, batch_first=True."""
import torch
from torch import nn


class ViT(nn.Module):
    def __init__(self, image_size=32, patch_size=8, num_classes=5, dim=32, depth=2, heads=2):
        super().__init__()
        self.patchify = nn.Conv2d(3, dim, patch_size, patch_size)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.zeros(1, (image_size // patch_size) ** 2 + 1, dim))
        layer = nn.TransformerEncoderLayer(dim, heads, dim_feedforward=64, dropout=0.1,
                                           activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=depth)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.patchify(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(len(x), -1, -1), x], dim=1) + self.pos
        x = self.encoder(x)
        return self.head(x[:, 0])
'''

ENCODER_SEQUENCE_FIRST = '''
"""nn.TransformerEncoderLayer blocks with the default batch_first=False: (N, B, D) tokens."""
import torch
from torch import nn


class ViT(nn.Module):
    def __init__(self, image_size=32, patch_size=8, num_classes=5, dim=32, depth=2, heads=4):
        super().__init__()
        self.patchify = nn.Conv2d(3, dim, patch_size, patch_size)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.zeros(1, (image_size // patch_size) ** 2 + 1, dim))
        self.layers = nn.ModuleList(
            [nn.TransformerEncoderLayer(dim, heads, dim_feedforward=64) for _ in range(depth)]
        )
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.patchify(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(len(x), -1, -1), x], dim=1) + self.pos
        x = x.transpose(0, 1)  # (N, B, D)
        for layer in self.layers:
            x = layer(x)
        x = x.transpose(0, 1)
        return self.head(self.norm(x[:, 0]))
'''

DEIT = '''
"""DeiT-style: CLS and distillation tokens, two heads; attention as (B·H, N, N) with bmm."""
import torch
import torch.nn.functional as F
from torch import nn


class Attention(nn.Module):
    def __init__(self, dim, num_heads):
        super().__init__()
        self.heads = num_heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        H, d = self.heads, C // self.heads
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q = q.reshape(B, N, H, d).transpose(1, 2).reshape(B * H, N, d)
        k = k.reshape(B, N, H, d).transpose(1, 2).reshape(B * H, N, d)
        v = v.reshape(B, N, H, d).transpose(1, 2).reshape(B * H, N, d)
        attn = F.softmax(torch.bmm(q, k.transpose(1, 2)) / d ** 0.5, dim=-1)
        out = torch.bmm(attn, v).reshape(B, H, N, d).transpose(1, 2).reshape(B, N, C)
        return self.proj(out)


class Block(nn.Module):
    def __init__(self, dim, num_heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, num_heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class DistilledViT(nn.Module):
    def __init__(self, img_size=32, patch_size=8, num_classes=5, embed_dim=32, depth=2,
                 num_heads=2):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, embed_dim, patch_size, patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.dist_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, (img_size // patch_size) ** 2 + 2, embed_dim))
        self.blocks = nn.Sequential(*[Block(embed_dim, num_heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(embed_dim, eps=1e-6)
        self.head = nn.Linear(embed_dim, num_classes)
        self.head_dist = nn.Linear(embed_dim, num_classes)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        B = x.shape[0]
        x = torch.cat([self.cls_token.expand(B, -1, -1), self.dist_token.expand(B, -1, -1), x], 1)
        x = self.norm(self.blocks(x + self.pos_embed))
        x_cls, x_dist = self.head(x[:, 0]), self.head_dist(x[:, 1])
        if self.training:
            return x_cls, x_dist
        return (x_cls + x_dist) / 2
'''

SDPA = '''
"""Fused attention with F.scaled_dot_product_attention; no CLS token, mean pooling; a factory
function builds it and the forward returns an object with .logits."""
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class Output:
    logits: torch.Tensor
    features: torch.Tensor


class Attention(nn.Module):
    def __init__(self, dim, heads, dropout=0.1):
        super().__init__()
        self.heads = heads
        self.dropout = dropout
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        p = self.dropout if self.training else 0.0
        x = F.scaled_dot_product_attention(q, k, v, dropout_p=p)
        return self.proj(x.transpose(1, 2).reshape(B, N, C))


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class SDPAViT(nn.Module):
    def __init__(self, dim, depth, heads, num_classes, grid=4, patch=8):
        super().__init__()
        self.embed = nn.Conv2d(3, dim, patch, patch)
        self.pos = nn.Parameter(torch.zeros(1, grid * grid, dim))
        self.blocks = nn.ModuleList([Block(dim, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.embed(x).flatten(2).transpose(1, 2) + self.pos
        for block in self.blocks:
            x = block(x)
        features = self.norm(x).mean(dim=1)
        return Output(self.head(features), features)


def sdpa_vit(dim=32, depth=2, heads=2, num_classes=5):
    return SDPAViT(dim, depth, heads, num_classes)
'''


# -- attention by hand, from each attention module's input and its own weights --------------


def _heads(t: Tensor, H: int) -> Tensor:
    """(B, N, H·d) -> (B, H, N, d)."""
    B, N, _ = t.shape
    return t.reshape(B, N, H, -1).transpose(1, 2)


def _probabilities(q: Tensor, k: Tensor) -> Tensor:
    """softmax(q kᵀ / √d) over keys: (B, H, N, N)."""
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)


def fused_by_hand(module: nn.Module, args: tuple) -> Tensor:
    """Attention of a module with one fused qkv Linear (q, k, v in that order) and ``heads``."""
    x = args[0]
    D = module.qkv.out_features // 3
    W, b = module.qkv.weight, module.qkv.bias
    q = x @ W[:D].T + b[:D]
    k = x @ W[D : 2 * D].T + b[D : 2 * D]
    return _probabilities(_heads(q, module.heads), _heads(k, module.heads))


def separate_by_hand(module: nn.Module, args: tuple) -> Tensor:
    """Attention of a module with bias-free query / key Linear layers and ``heads``."""
    x = args[0]
    q = x @ module.query.weight.T
    k = x @ module.key.weight.T
    return _probabilities(_heads(q, module.heads), _heads(k, module.heads))


def multihead_by_hand(module: nn.Module, args: tuple) -> Tensor:
    """Attention of nn.MultiheadAttention for self-attention on args[0]."""
    x = args[0] if module.batch_first else args[0].transpose(0, 1)  # (B, N, E)
    E = module.embed_dim
    W, b = module.in_proj_weight, module.in_proj_bias
    q = x @ W[:E].T + b[:E]
    k = x @ W[E : 2 * E].T + b[E : 2 * E]
    return _probabilities(_heads(q, module.num_heads), _heads(k, module.num_heads))


@dataclass(frozen=True)
class Layout:
    key: str
    source: str
    name: str  # class or function to open
    args: dict[str, Any]
    attention_class: str  # class name of the modules whose input gives the attention
    by_hand: Callable[[nn.Module, tuple], Tensor]
    depth: int
    heads: int
    prefix: int
    num_classes: int
    settings: dict[str, Any] = field(default_factory=dict)  # vitviz settings (--config)


LAYOUTS = [
    Layout(
        "fused_qkv",
        FUSED_QKV,
        "VisionTransformer",
        {"num_classes": 5},
        "Attention",
        fused_by_hand,
        3,
        2,
        1,
        5,
    ),
    Layout(
        "separate_qkv",
        SEPARATE_QKV,
        "ViT",
        {"image_size": 32, "patch_size": 8, "num_classes": 4, "dim": 32, "depth": 2, "heads": 4},
        "SelfAttention",
        separate_by_hand,
        2,
        4,
        1,
        4,
    ),
    Layout(
        "multihead",
        MULTIHEAD,
        "ViT",
        {"n_classes": 3},
        "MultiheadAttention",
        multihead_by_hand,
        2,
        4,
        1,
        3,
    ),
    Layout(
        "encoder_batch_first",
        ENCODER_BATCH_FIRST,
        "ViT",
        {},
        "MultiheadAttention",
        multihead_by_hand,
        2,
        2,
        1,
        5,
    ),
    Layout(
        "encoder_sequence_first",
        ENCODER_SEQUENCE_FIRST,
        "ViT",
        {"depth": 3},
        "MultiheadAttention",
        multihead_by_hand,
        3,
        4,
        1,
        5,
    ),
    Layout(
        "deit_distilled",
        DEIT,
        "DistilledViT",
        {"num_classes": 5},
        "Attention",
        fused_by_hand,
        2,
        2,
        2,
        5,
    ),
    Layout(
        "sdpa",
        SDPA,
        "sdpa_vit",
        {"depth": 2},
        "Attention",
        fused_by_hand,
        2,
        2,
        0,
        5,
        {"image_size": 32, "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]},
    ),
]
LAYOUT_IDS = [layout.key for layout in LAYOUTS]


# -- writing a layout to disk with trained-looking weights -----------------------------------


@dataclass
class WrittenModel:
    layout: Layout
    file: Path
    weights: Path  # the state dict of ``model``
    model: nn.Module  # built independently of vitviz from the same file, eval mode


def import_file(path: Path) -> Any:
    """Import a model file the plain way (independent of vitviz's importer)."""
    name = f"testmodel_{path.parent.name}_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def scramble(model: nn.Module, seed: int) -> None:
    """Weights large enough for peaked attention and distinct logits (LayerNorm gains near 1)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            for name, p in module.named_parameters(recurse=False):
                offset = 1.0 if isinstance(module, nn.LayerNorm) and name == "weight" else 0.0
                p.copy_(offset + 0.3 * torch.randn(p.shape, generator=g))


def write_model(layout: Layout, folder: Path, seed: int = 0) -> WrittenModel:
    """model.py and its state dict (.pth; .safetensors for every other layout) in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    file = folder / "model.py"
    file.write_text(textwrap.dedent(layout.source).lstrip(), encoding="utf-8")
    module = import_file(file)
    torch.manual_seed(seed)
    model = getattr(module, layout.name)(**layout.args)
    scramble(model, seed)
    model.eval()
    state = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    if LAYOUT_IDS.index(layout.key) % 2:
        from safetensors.torch import save_file

        weights = folder / "weights.safetensors"
        save_file(state, str(weights))
    else:
        weights = folder / "weights.pth"
        torch.save(state, weights)
    return WrittenModel(layout, file, weights, model)


def attention_by_hand(written: WrittenModel, x: Tensor) -> list[Tensor]:
    """Each attention module's attention, from its input during a plain forward of the
    independently built model, in call order: L × (B, H, N, N)."""
    inputs: list[tuple[nn.Module, tuple]] = []
    handles = [
        m.register_forward_pre_hook(lambda mod, args: inputs.append((mod, args)))
        for m in written.model.modules()
        if type(m).__name__ == written.layout.attention_class
    ]
    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)  # the fused layer would skip self_attn
    try:
        with torch.no_grad():
            written.model(x)
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)
        for h in handles:
            h.remove()
    with torch.no_grad():
        return [written.layout.by_hand(mod, args) for mod, args in inputs]


def sample_input(seed: int = 1, size: int = 32) -> Tensor:
    return torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(seed))


# -- the layouts themselves work as their authors meant --------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS, ids=LAYOUT_IDS)
def test_layout_files_run_as_written(layout: Layout, tmp_path: Path):
    written = write_model(layout, tmp_path)
    out = written.model(sample_input())
    logits = out if isinstance(out, Tensor) else getattr(out, "logits", None)
    if logits is None:
        logits = out[0]
    assert logits.shape == (1, layout.num_classes)
    hand = attention_by_hand(written, sample_input())
    assert len(hand) == layout.depth
    tokens = layout.prefix + 16
    assert all(a.shape == (1, layout.heads, tokens, tokens) for a in hand)
    # Peaked enough that a wrong capture could not pass for a right one.
    assert max(float(a.max()) for a in hand) > 0.5


def test_deit_layout_returns_two_heads_in_train_mode(tmp_path: Path):
    written = write_model(LAYOUTS[LAYOUT_IDS.index("deit_distilled")], tmp_path)
    written.model.train()
    out = written.model(sample_input())
    assert isinstance(out, tuple) and len(out) == 2
