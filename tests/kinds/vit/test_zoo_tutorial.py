"""Tutorial-style ViTs written with PyTorch's own layers, and vit-pytorch's layout, open with their
own logits and attention once the sidecar says what the weights can't."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from einops.layers.torch import Rearrange
from torch import Tensor, nn
from zoo_helpers import (
    LOGIT_ATOL,
    assert_attention,
    assert_close,
    capture_inputs,
    images,
    mha_attention,
    ours,
    randomize_,
)

from vitviz.checkpoints import CheckpointError, load_checkpoint

# -- the pre-norm tutorial model on nn.MultiheadAttention (sequence-first, Linear patches) -------


class AttentionBlock(nn.Module):
    def __init__(self, dim: int, hidden: int, heads: int) -> None:
        super().__init__()
        self.layer_norm_1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads)
        self.layer_norm_2 = nn.LayerNorm(dim)
        self.linear = nn.Sequential(
            nn.Linear(dim, hidden),
            nn.GELU(),
            nn.Dropout(0.0),
            nn.Linear(hidden, dim),
            nn.Dropout(0.0),
        )

    def forward(self, x: Tensor) -> Tensor:  # (N, B, D)
        h = self.layer_norm_1(x)
        x = x + self.attn(h, h, h)[0]
        return x + self.linear(self.layer_norm_2(x))


class MHATutorialViT(nn.Module):
    def __init__(
        self,
        dim: int = 32,
        hidden: int = 64,
        heads: int = 4,
        layers: int = 2,
        patch: int = 4,
        image: int = 32,
        classes: int = 10,
        channels: int = 3,
    ) -> None:
        super().__init__()
        self.patch = patch
        self.input_layer = nn.Linear(channels * patch * patch, dim)
        self.transformer = nn.Sequential(
            *(AttentionBlock(dim, hidden, heads) for _ in range(layers))
        )
        self.mlp_head = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, classes))
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim))
        self.pos_embedding = nn.Parameter(torch.randn(1, 1 + (image // patch) ** 2, dim))

    def forward(self, x: Tensor) -> Tensor:
        B, C, H, W = x.shape
        p = self.patch
        x = x.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 1, 3, 5).flatten(1, 2)
        x = self.input_layer(x.flatten(2, 4))  # (c p1 p2) patch vectors
        x = torch.cat([self.cls_token.expand(B, -1, -1), x], dim=1)
        x = x + self.pos_embedding[:, : x.shape[1]]
        x = self.transformer(x.transpose(0, 1))
        return self.mlp_head(x[0])


def _mha_reference(model: nn.Module, attns: list[nn.MultiheadAttention], x: Tensor):
    inputs, handles = capture_inputs(attns)
    with torch.no_grad():
        logits = model(x)
    for h in handles:
        h.remove()
    return logits, [mha_attention(m, i) for m, i in zip(attns, inputs, strict=True)]


@pytest.mark.parametrize("heads", [2, 4])
def test_mha_tutorial_model(tmp_path: Path, heads: int) -> None:
    torch.manual_seed(0)
    model = randomize_(MHATutorialViT(heads=heads))
    path = tmp_path / "checkpoint.pth"
    torch.save(model.state_dict(), path)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    assert str(info.value).startswith(
        "checkpoint.pth looks like a model built on nn.MultiheadAttention; the weights don't "
        'say: heads, patch_order. Put them in checkpoint.pth.vitviz.json, e.g. {"heads": 4, '
        '"patch_order": "c p1 p2"}'
    )
    (tmp_path / "checkpoint.pth.vitviz.json").write_text(
        json.dumps({"heads": heads, "patch_order": "c p1 p2"})
    )
    loaded = load_checkpoint(path)
    assert loaded.family == "tutorial-mha"
    assert loaded.config.image_size == (32, 32) and loaded.config.patch_size == 4
    x = images(2, 32, 32)
    ref_logits, ref_attn = _mha_reference(model, [b.attn for b in model.transformer], x)
    logits, attn = ours(loaded, x)
    assert_close("logits", ref_logits, logits, LOGIT_ATOL)
    assert_attention(ref_attn, attn)


# -- nn.TransformerEncoderLayer ------------------------------------------------------------------


class EncoderLayerViT(nn.Module):
    def __init__(
        self, heads: int, norm_first: bool, activation: str, final_norm: bool, channels: int = 3
    ) -> None:
        super().__init__()
        dim, self.patch = 48, 8
        self.patch_embed = nn.Conv2d(channels, dim, 8, 8)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, 1 + 2 * 6, dim))
        layer = nn.TransformerEncoderLayer(
            dim,
            heads,
            dim_feedforward=80,
            dropout=0.0,
            activation=activation,
            batch_first=True,
            norm_first=norm_first,
        )
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim) if final_norm else nn.Identity()
        self.head = nn.Linear(dim, 3)

    def forward(self, x: Tensor) -> Tensor:
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        return self.head(self.norm(self.encoder(x))[:, 0])


@pytest.mark.parametrize(
    ("heads", "norm_first", "activation"), [(4, False, "relu"), (2, True, "gelu")]
)
def test_transformer_encoder_layer_model(
    tmp_path: Path, heads: int, norm_first: bool, activation: str
) -> None:
    torch.manual_seed(1)
    model = randomize_(
        EncoderLayerViT(heads, norm_first, activation, final_norm=norm_first), seed=1
    )
    path = tmp_path / "tel.pt"
    torch.save({"model": model.state_dict(), "epoch": 3}, path)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    msg = str(info.value)
    assert "looks like a model built on nn.TransformerEncoderLayer" in msg
    assert "the weights don't say: heads, norm_first, activation, image_size." in msg
    settings = {
        "heads": heads,
        "norm_first": norm_first,
        "activation": activation,
        "image_size": [16, 48],
    }
    loaded = load_checkpoint(path, config=settings)
    assert loaded.family == "tutorial-transformer-encoder"
    assert loaded.config.final_norm == norm_first
    x = images(2, 16, 48, seed=1)
    layers = list(model.encoder.layers)
    ref_logits, ref_attn = _mha_reference(model, [m.self_attn for m in layers], x)
    logits, attn = ours(loaded, x)
    assert_close("logits", ref_logits, logits, LOGIT_ATOL)
    assert_attention(ref_attn, attn)


# -- vit-pytorch (lucidrains) layout ---------------------------------------------------------------


class LucidAttention(nn.Module):
    def __init__(self, dim: int, heads: int, dim_head: int) -> None:
        super().__init__()
        inner = heads * dim_head
        self.heads, self.scale = heads, dim_head**-0.5
        self.norm = nn.LayerNorm(dim)
        self.to_qkv = nn.Linear(dim, inner * 3, bias=False)
        self.to_out = nn.Sequential(nn.Linear(inner, dim), nn.Dropout(0.0))
        self.last: Tensor | None = None

    def forward(self, x: Tensor) -> Tensor:
        B, N, _ = x.shape
        q, k, v = self.to_qkv(self.norm(x)).chunk(3, dim=-1)
        q, k, v = (t.reshape(B, N, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        attn = (q @ k.transpose(-1, -2) * self.scale).softmax(dim=-1)
        self.last = attn.detach()
        return self.to_out((attn @ v).transpose(1, 2).reshape(B, N, -1))


class LucidViT(nn.Module):
    """vit-pytorch's ViT: Rearrange + LayerNorm + Linear + LayerNorm patches, pre-norm blocks,
    transformer.norm, pool 'cls' or 'mean' (over every token), mlp_head Linear; ``channels``
    as vit-pytorch's (1 for MNIST-style models)."""

    def __init__(
        self,
        heads: int,
        dim_head: int,
        pool: str,
        image: tuple[int, int] = (32, 48),
        patch: int = 8,
        dim: int = 32,
        depth: int = 2,
        mlp: int = 64,
        channels: int = 3,
        classes: int = 6,
    ) -> None:
        super().__init__()
        patch_dim = channels * patch * patch
        n = (image[0] // patch) * (image[1] // patch)
        self.to_patch_embedding = nn.Sequential(
            Rearrange("b c (h p1) (w p2) -> b (h w) (p1 p2 c)", p1=patch, p2=patch),
            nn.LayerNorm(patch_dim),
            nn.Linear(patch_dim, dim),
            nn.LayerNorm(dim),
        )
        self.pos_embedding = nn.Parameter(torch.randn(1, n + 1, dim))
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim))
        self.transformer = nn.Module()
        self.transformer.norm = nn.LayerNorm(dim)
        self.transformer.layers = nn.ModuleList(
            nn.ModuleList(
                [
                    LucidAttention(dim, heads, dim_head),
                    nn.Sequential(
                        nn.LayerNorm(dim),
                        nn.Linear(dim, mlp),
                        nn.GELU(),
                        nn.Dropout(0.0),
                        nn.Linear(mlp, dim),
                        nn.Dropout(0.0),
                    ),
                ]
            )
            for _ in range(depth)
        )
        self.pool = pool
        self.mlp_head = nn.Linear(dim, classes)

    def forward(self, img: Tensor) -> Tensor:
        x = self.to_patch_embedding(img)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        x = x + self.pos_embedding[:, : x.shape[1]]
        for attn, ff in self.transformer.layers:
            x = attn(x) + x
            x = ff(x) + x
        x = self.transformer.norm(x)
        x = x.mean(dim=1) if self.pool == "mean" else x[:, 0]
        return self.mlp_head(x)


@pytest.mark.parametrize(("heads", "dim_head", "pool"), [(4, 8, "cls"), (2, 24, "mean")])
def test_vit_pytorch_layout(tmp_path: Path, heads: int, dim_head: int, pool: str) -> None:
    torch.manual_seed(2)
    model = randomize_(LucidViT(heads, dim_head, pool), seed=2)
    path = tmp_path / "vit.pt"
    torch.save(model.state_dict(), path)
    with pytest.raises(CheckpointError, match="the weights don't say: heads, image_size"):
        load_checkpoint(path)
    settings = {"heads": heads, "image_size": [32, 48]}
    if pool == "mean":
        settings["global_pool"] = "avg"
    loaded = load_checkpoint(path, config=settings)
    cfg = loaded.config
    assert loaded.family == "vit-pytorch"
    assert (cfg.patch_embed, cfg.patch_norm_pre, cfg.patch_norm_post, cfg.head_dim) == (
        "linear",
        True,
        True,
        dim_head,
    )
    x = images(2, 32, 48, seed=2)
    with torch.no_grad():
        ref_logits = model(x)
    ref_attn = [layer[0].last for layer in model.transformer.layers]
    logits, attn = ours(loaded, x)
    assert_close("logits", ref_logits, logits, LOGIT_ATOL)
    assert_attention(ref_attn, attn)


def _old_names(key: str) -> str:
    """vit-pytorch before 1.0: PreNorm(dim, fn) wrappers, LayerNorm inside mlp_head."""
    key = re.sub(r"(layers\.\d+\.0\.)(to_qkv|to_out)", r"\1fn.\2", key)
    key = re.sub(r"(layers\.\d+\.1\.)net\.0\.", r"\1norm.", key)
    key = re.sub(r"(layers\.\d+\.1\.)net\.1\.", r"\1fn.net.0.", key)
    key = re.sub(r"(layers\.\d+\.1\.)net\.4\.", r"\1fn.net.3.", key)
    return (
        key.replace("transformer.norm.", "mlp_head.0.")
        .replace("mlp_head.weight", "mlp_head.1.weight")
        .replace("mlp_head.bias", "mlp_head.1.bias")
    )


def test_vit_pytorch_old_prenorm_layout(tmp_path: Path) -> None:
    torch.manual_seed(3)
    model = randomize_(LucidViT(4, 8, "cls"), seed=3)
    sd = {_old_names(k): v for k, v in model.state_dict().items()}
    assert "transformer.layers.0.0.fn.to_qkv.weight" in sd and "mlp_head.0.weight" in sd
    path = tmp_path / "old.pt"
    torch.save(sd, path)
    loaded = load_checkpoint(path, config={"heads": 4, "image_size": [32, 48]})
    x = images(1, 32, 48, seed=3)
    with torch.no_grad():
        ref_logits = model(x)
    assert_close("logits", ref_logits, ours(loaded, x)[0], LOGIT_ATOL)


# -- channels other than RGB: read from the patch embedding --------------------------------------


def _lucid_checkpoint(tmp_path: Path, channels: int, patch: int) -> tuple[LucidViT, Path]:
    """A 28 × 28 vit-pytorch ViT taking ``channels``-channel images, saved as a state dict."""
    torch.manual_seed(4)
    model = randomize_(LucidViT(4, 8, "cls", image=(28, 28), patch=patch, channels=channels), 4)
    path = tmp_path / "vit.pt"
    torch.save(model.state_dict(), path)
    return model, path


@pytest.mark.parametrize(
    ("channels", "patch", "settings", "note"),
    [
        (1, 4, {}, "in_channels 1 inferred (16 values per patch = 1 × 4²)"),
        (1, 4, {"patch_size": 4}, "in_channels 1 from the patch size 4"),
        (1, 4, {"image_size": 28}, "in_channels 1, patch size 4 from the image size and position"),
        (4, 4, {"in_channels": 4}, None),  # 64 values would also be 1 × 8²: the settings say
        (5, 2, {"patch_size": 2}, "in_channels 5 from the patch size 2"),
    ],
)
def test_vit_pytorch_channels_from_the_patch_embedding(
    tmp_path: Path, channels: int, patch: int, settings: dict, note: str | None
) -> None:
    model, path = _lucid_checkpoint(tmp_path, channels, patch)
    loaded = load_checkpoint(path, config={"heads": 4, **settings})
    cfg = loaded.config
    assert (cfg.in_channels, cfg.patch_size, cfg.image_size) == (channels, patch, (28, 28))
    assert loaded.preprocessing.channels == channels
    assert len(loaded.preprocessing.mean) == len(loaded.preprocessing.std) == channels
    if note is not None:
        assert any(n.startswith(note) for n in loaded.notes), loaded.notes
    x = torch.randn(2, channels, 28, 28, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        ref_logits = model(x)
    ref_attn = [layer[0].last for layer in model.transformer.layers]
    logits, attn = ours(loaded, x)
    assert_close("logits", ref_logits, logits, LOGIT_ATOL)
    assert_attention(ref_attn, attn)


@pytest.mark.parametrize(
    ("channels", "patch", "settings", "message"),
    [
        (
            5,
            2,
            {},
            "takes 20 values per patch (in_channels × patch²), neither 3 × p² nor 1 × p². Put "
            'the patch size in vit.pt.vitviz.json, e.g. {"patch_size": 2}',
        ),
        (1, 4, {"in_channels": 3}, "takes 16 values per patch, not in_channels × patch² for"),
        (1, 4, {"patch_size": 3}, "not a multiple of patch_size² = 9; check patch_size"),
        (1, 4, {"in_channels": 1.0}, "in_channels must be a"),
        (
            1,
            4,
            {"preprocessing": {"mean": [0.5, 0.5, 0.5]}},
            "mean must be one number (the model takes 1-channel, grayscale images)",
        ),
        (
            1,
            4,
            {"preprocessing": {"channels": 3}},
            "the preprocessing gives 3 channels but the model takes 1-channel images",
        ),
    ],
)
def test_vit_pytorch_channels_that_do_not_fit_say_what_to_set(
    tmp_path: Path, channels: int, patch: int, settings: dict, message: str
) -> None:
    _, path = _lucid_checkpoint(tmp_path, channels, patch)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path, config={"heads": 4, **settings})
    assert message in str(info.value) and "\n" not in str(info.value)


def test_tutorial_models_of_one_channel(tmp_path: Path) -> None:
    """A Conv2d patch embedding says its channels; a Linear one is read like vit-pytorch's."""
    torch.manual_seed(6)
    conv = randomize_(EncoderLayerViT(2, True, "gelu", True, channels=1), seed=6)
    torch.save(conv.state_dict(), tmp_path / "conv.pt")
    settings = {"heads": 2, "norm_first": True, "activation": "gelu", "image_size": [16, 48]}
    loaded = load_checkpoint(tmp_path / "conv.pt", config=settings)
    assert loaded.config.in_channels == 1 and loaded.preprocessing.channels == 1
    assert any(n.startswith("preprocessing assumed: mean 0.5 and std 0.5") for n in loaded.notes)
    x = images(2, 16, 48, seed=6)[:, :1]
    ref = _mha_reference(conv, [m.self_attn for m in conv.encoder.layers], x)
    got = ours(loaded, x)
    assert_close("logits", ref[0], got[0], LOGIT_ATOL)
    assert_attention(ref[1], got[1])

    linear = randomize_(MHATutorialViT(heads=2, channels=1), seed=7)
    torch.save(linear.state_dict(), tmp_path / "linear.pt")
    loaded = load_checkpoint(tmp_path / "linear.pt", config={"heads": 2, "patch_order": "c p1 p2"})
    assert (loaded.config.in_channels, loaded.config.patch_size) == (1, 4)
    assert any(n.startswith("in_channels 1 inferred") for n in loaded.notes)
    x = images(2, 32, 32, seed=7)[:, :1]
    ref = _mha_reference(linear, [b.attn for b in linear.transformer], x)
    got = ours(loaded, x)
    assert_close("logits", ref[0], got[0], LOGIT_ATOL)
    assert_attention(ref[1], got[1])
