"""Original DINO / DINOv2 checkpoints (backbone files and training checkpoints) open with the same
features as the library that implements them.

The facebookresearch repositories are not installed; timm's VisionTransformer has the same
layout and forward (DINO's keys are timm's), so it is the reference. The original position-table
resampling for other sizes (scale factor (g + 0.1) / g0) is transcribed from DINO's code.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import timm
import torch
import torch.nn.functional as F
from zoo_helpers import (
    LOGIT_ATOL,
    assert_attention,
    assert_close,
    images,
    ours,
    randomize_,
    timm_reference,
)

from vitviz.checkpoints import load_checkpoint


def _check(model: torch.nn.Module, loaded, x: torch.Tensor) -> None:
    ref_feats, ref_attn = timm_reference(model, x, features=True)
    with torch.no_grad():
        feats = loaded.model.forward_features(x)[0]
    assert_close("features", ref_feats, feats, LOGIT_ATOL)
    _, attn = ours(loaded, x)
    assert_attention(ref_attn, attn)


def _dino_v1(seed: int = 0, img: int = 32, **kw: object) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = timm.create_model(
        "vit_small_patch16_224",
        pretrained=False,
        img_size=img,
        patch_size=8,
        embed_dim=48,
        depth=2,
        num_heads=3,
        num_classes=0,
        **kw,
    )
    return randomize_(model, seed)


def test_dino_v1_backbone_file(tmp_path: Path) -> None:
    model = _dino_v1()
    path = tmp_path / "dino_vits8_pretrain.pth"
    torch.save(model.state_dict(), path)
    loaded = load_checkpoint(path, config={"heads": 3})
    assert loaded.family == "dino" and loaded.config.num_classes == 0
    assert loaded.config.pos_embed_interp == "bicubic_offset"
    _check(model, loaded, images(2, 32, 32))
    prep = loaded.preprocessing
    assert (prep.interpolation, prep.mean) == ("bicubic", pytest.approx((0.485, 0.456, 0.406)))


def _dino_interpolated(model: torch.nn.Module, h: int, w: int, patch: int) -> torch.Tensor:
    """DINO's interpolate_pos_encoding, transcribed: bicubic with scale factor (g + 0.1) / g0."""
    pos = model.pos_embed
    n = pos.shape[1] - 1
    side = int(math.sqrt(n))
    table = pos[:, 1:].reshape(1, side, side, -1).permute(0, 3, 1, 2)
    h0, w0 = h // patch + 0.1, w // patch + 0.1
    table = F.interpolate(table, scale_factor=(h0 / side, w0 / side), mode="bicubic")
    return torch.cat([pos[:, :1], table.permute(0, 2, 3, 1).reshape(1, -1, pos.shape[-1])], 1)


def test_dino_v1_other_size_uses_the_original_resampling(tmp_path: Path) -> None:
    model = _dino_v1(seed=1)
    path = tmp_path / "dino_vits8.pth"
    torch.save(model.state_dict(), path)
    loaded = load_checkpoint(path, config={"heads": 3})
    resized = _dino_v1(seed=1, img=(40, 56))
    with torch.no_grad():
        sd = {**model.state_dict(), "pos_embed": _dino_interpolated(model, 40, 56, 8)}
    resized.load_state_dict(sd)
    _check(resized, loaded, images(1, 40, 56, seed=1))


def test_dino_training_checkpoint_uses_the_teacher(tmp_path: Path) -> None:
    teacher, student = _dino_v1(seed=2), _dino_v1(seed=3)
    ckpt = {
        "teacher": {
            **{f"backbone.{k}": v for k, v in teacher.state_dict().items()},
            "head.mlp.0.weight": torch.zeros(8, 48),
            "head.last_layer.weight_g": torch.ones(16, 1),
        },
        "student": {f"module.backbone.{k}": v for k, v in student.state_dict().items()},
        "epoch": 7,
        "dino_loss": {"center": torch.zeros(1, 16)},
    }
    path = tmp_path / "checkpoint.pth"
    torch.save(ckpt, path)
    loaded = load_checkpoint(path, config={"heads": 3})
    assert loaded.family == "dino"
    assert any("teacher" in n for n in loaded.notes)
    assert any("dropped head.last_layer.weight_g" in n for n in loaded.notes)
    _check(teacher, loaded, images(1, 32, 32, seed=2))


def _dinov2(seed: int, reg: int = 0, **kw: object) -> torch.nn.Module:
    torch.manual_seed(seed)
    name = "vit_small_patch14_reg4_dinov2" if reg else "vit_small_patch14_dinov2"
    extra = {"reg_tokens": reg} if reg else {}
    model = timm.create_model(
        name,
        pretrained=False,
        img_size=28,
        patch_size=7,
        embed_dim=64,
        depth=2,
        num_heads=4,
        num_classes=0,
        **extra,
        **kw,
    )
    return randomize_(model, seed)


@pytest.mark.parametrize("chunked", [False, True])
def test_dinov2_backbone_drops_mask_token(tmp_path: Path, chunked: bool) -> None:
    model = _dinov2(seed=4)
    sd = {**model.state_dict(), "mask_token": torch.zeros(1, 64)}
    if chunked:  # BlockChunk layout: blocks.<chunk>.<index>.
        sd = {
            k.replace("blocks.", "blocks.0.", 1) if k.startswith("blocks.") else k: v
            for k, v in sd.items()
        }
    path = tmp_path / "dinov2_vits14_pretrain.pth"
    torch.save(sd, path)
    loaded = load_checkpoint(path, config={"heads": 4})
    assert loaded.family == "dinov2"
    assert any("dropped mask_token" in n for n in loaded.notes)
    assert loaded.config.image_size == (28, 28)
    _check(model, loaded, images(1, 28, 28, seed=4))


@pytest.mark.parametrize("size", [(28, 28), (42, 35)])
def test_dinov2_with_registers_original_layout(tmp_path: Path, size: tuple[int, int]) -> None:
    """Original layout: pos_embed covers CLS + patches, register_tokens join after it. timm
    folds CLS's entry into cls_token (no_embed_class): the same model."""
    model = _dinov2(seed=5, reg=4, dynamic_img_size=True)
    sd = dict(model.state_dict())
    cls_pos = torch.randn(1, 1, 64, generator=torch.Generator().manual_seed(9)) * 0.2
    original = {k: v for k, v in sd.items() if k not in ("cls_token", "reg_token", "pos_embed")}
    original.update(
        cls_token=sd["cls_token"] - cls_pos,
        register_tokens=sd["reg_token"],
        pos_embed=torch.cat([cls_pos, sd["pos_embed"]], dim=1),
        mask_token=torch.zeros(1, 64),
    )
    with torch.no_grad():  # timm's conversion: cls_token + pos_embed[:, 0]
        model.cls_token.copy_(original["cls_token"] + original["pos_embed"][:, :1])
    path = tmp_path / "dinov2_vits14_reg4_pretrain.pth"
    torch.save(original, path)
    loaded = load_checkpoint(path, config={"heads": 4})
    cfg = loaded.config
    assert (cfg.num_register_tokens, cfg.num_pos_prefix_tokens) == (4, 1)
    _check(model, loaded, images(1, *size, seed=5))
