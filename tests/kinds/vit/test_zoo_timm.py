"""timm ViT / DeiT / DINOv2-with-registers / avg-pool / CLIP-style checkpoints open with timm's own
logits, attention, class names and preprocessing (.pth, and model.safetensors + config.json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import timm
import torch
from timm.data import resolve_model_data_config
from timm.models import save_for_hf
from timm.models.vision_transformer import VisionTransformer as TimmViT
from zoo_helpers import (
    LOGIT_ATOL,
    assert_attention,
    assert_close,
    images,
    ours,
    randomize_,
    timm_reference,
)

from vitviz.checkpoints import CheckpointError, load_checkpoint
from vitviz.checkpoints.families.common import example_heads

TINY = dict(pretrained=False, patch_size=8, embed_dim=48, depth=2)


def _check(model: torch.nn.Module, loaded, x: torch.Tensor) -> None:
    ref_logits, ref_attn = timm_reference(model, x)
    logits, attn = ours(loaded, x)
    assert_close("logits", ref_logits, logits, LOGIT_ATOL)
    assert_attention(ref_attn, attn)


def _assert_timm_preprocessing(loaded, folder: Path) -> None:
    """As timm states it for the saved folder (its config.json)."""
    data = resolve_model_data_config(timm.create_model(f"local-dir:{folder}", pretrained=False))
    prep = loaded.preprocessing
    assert prep.image_size == tuple(data["input_size"][1:])
    assert prep.crop_pct == pytest.approx(data["crop_pct"])
    assert prep.interpolation == data["interpolation"]
    assert prep.mean == pytest.approx(tuple(data["mean"]))
    assert prep.std == pytest.approx(tuple(data["std"]))
    assert prep.resize == ("crop" if data["crop_mode"] == "center" else data["crop_mode"])


def test_timm_vit_safetensors_folder_with_config_json(tmp_path: Path) -> None:
    """Non-square 32×48 input, 3 heads, label names, from config.json: folder and file alike."""
    torch.manual_seed(0)
    model = timm.create_model(
        "vit_tiny_patch16_224", img_size=(32, 48), num_heads=3, num_classes=4, **TINY
    )
    randomize_(model)
    names = ["tabby", "rocket", "coffee", "teapot"]
    save_for_hf(
        model, tmp_path / "vit", model_config={"label_names": names}, safe_serialization=True
    )
    x = images(2, 32, 48)
    for target in (tmp_path / "vit", tmp_path / "vit" / "model.safetensors"):
        loaded = load_checkpoint(target)
        assert loaded.family == "timm"
        assert loaded.config.heads == 3 and loaded.config.image_size == (32, 48)
        assert loaded.class_names == names
        _assert_timm_preprocessing(loaded, tmp_path / "vit")
        _check(model, loaded, x)


def test_timm_deit_distilled_pth_averages_both_heads(tmp_path: Path) -> None:
    torch.manual_seed(1)
    model = timm.create_model(
        "deit_tiny_distilled_patch16_224", img_size=32, num_heads=2, num_classes=6, **TINY
    )
    randomize_(model, seed=1)
    path = tmp_path / "deit.pth"
    torch.save(model.state_dict(), path)
    loaded = load_checkpoint(path, config={"heads": 2, "activation": "gelu"})
    assert loaded.config.distill_token and loaded.model.head_dist is not None
    assert any("head_dist" in n for n in loaded.notes)
    _check(model, loaded, images(2, 32, 32, seed=1))
    # Without config.json: timm's DeiT defaults.
    assert loaded.preprocessing.crop_pct == pytest.approx(0.875)
    assert loaded.preprocessing.mean == pytest.approx((0.485, 0.456, 0.406))


@pytest.mark.parametrize("size", [(28, 28), (42, 56)])
def test_timm_dinov2_registers_layerscale_no_embed_class(
    tmp_path: Path, size: tuple[int, int]
) -> None:
    """reg_token, ls1/ls2.gamma, no_embed_class; other input sizes resampled as timm does."""
    torch.manual_seed(2)
    model = timm.create_model(
        "vit_small_patch14_reg4_dinov2",
        pretrained=False,
        img_size=28,
        patch_size=7,
        embed_dim=64,
        depth=2,
        num_heads=4,
        num_classes=0,
        dynamic_img_size=True,
    )
    randomize_(model, seed=2)
    save_for_hf(model, tmp_path / "reg", safe_serialization=True)
    loaded = load_checkpoint(tmp_path / "reg")
    cfg = loaded.config
    assert (cfg.num_register_tokens, cfg.no_embed_class, cfg.layer_scale_init is not None) == (
        4,
        True,
        True,
    )
    assert cfg.num_classes == 0 and loaded.class_names == []
    _check(model, loaded, images(1, *size, seed=2))


@pytest.mark.parametrize("heads", [2, 4])
def test_timm_avg_pool_fc_norm_without_class_token(tmp_path: Path, heads: int) -> None:
    torch.manual_seed(3)
    model = TimmViT(
        img_size=32,
        patch_size=8,
        embed_dim=32,
        depth=2,
        num_heads=heads,
        num_classes=5,
        class_token=False,
        global_pool="avg",
        fc_norm=True,
    )
    randomize_(model, seed=3)
    path = tmp_path / "gap.pth"
    torch.save(model.state_dict(), path)
    settings = {"heads": heads, "activation": "gelu"}
    path.with_name("gap.pth.vitviz.json").write_text(json.dumps(settings))
    loaded = load_checkpoint(path)
    cfg = loaded.config
    assert (cfg.class_token, cfg.global_pool, cfg.fc_norm) == (False, "avg", True)
    _check(model, loaded, images(2, 32, 32, seed=3))


def test_timm_clip_style_norm_pre_no_qkv_bias_quick_gelu(tmp_path: Path) -> None:
    torch.manual_seed(4)
    model = timm.create_model(
        "vit_tiny_patch16_224",
        img_size=32,
        num_heads=4,
        num_classes=3,
        pre_norm=True,
        qkv_bias=False,
        act_layer="quick_gelu",
        **TINY,
    )
    randomize_(model, seed=4)
    save_for_hf(model, tmp_path / "clip", safe_serialization=True)
    loaded = load_checkpoint(tmp_path / "clip" / "model.safetensors")
    cfg = loaded.config
    assert (cfg.pre_norm, cfg.qkv_bias, cfg.activation) == (True, False, "quick_gelu")
    assert any("zero bias" in n for n in loaded.notes)
    _check(model, loaded, images(2, 32, 32, seed=4))


def test_timm_1000_classes_get_imagenet_names(tmp_path: Path) -> None:
    torch.manual_seed(5)
    model = timm.create_model(
        "vit_tiny_patch16_224", img_size=32, num_heads=3, num_classes=1000, **TINY
    )
    path = tmp_path / "in1k.pth"
    torch.save(model.state_dict(), path)
    loaded = load_checkpoint(path, config={"heads": 3, "activation": "gelu"})
    assert loaded.class_names[0] == "tench" and len(loaded.class_names) == 1000


def test_timm_state_dict_of_unknown_width_asks_for_heads(tmp_path: Path) -> None:
    model = timm.create_model(
        "vit_tiny_patch16_224", img_size=32, num_heads=3, num_classes=2, **TINY
    )
    path = tmp_path / "mine.pth"
    torch.save(model.state_dict(), path)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    msg = str(info.value)
    assert "mine.pth looks like a timm VisionTransformer" in msg
    assert "the weights don't say: heads, activation." in msg
    assert '"heads": 2' in msg and "--heads N" in msg  # 12 doesn't divide 48


@pytest.mark.parametrize(("dim", "heads"), [(256, 4), (320, 5), (896, 14), (768, 12), (1280, 16)])
def test_suggested_heads_divide_the_width_as_timm_does(dim: int, heads: int) -> None:
    """timm's choices for these widths (xsmall, little, base-plus, base, huge)."""
    assert example_heads(dim) == heads


def test_timm_qk_norm_is_read_from_its_tensors(tmp_path: Path) -> None:
    """qk-norm (a LayerNorm on each head's q and k): its tensors say so, and the numbers are
    timm's."""
    torch.manual_seed(5)
    model = TimmViT(
        img_size=32, patch_size=8, embed_dim=32, depth=1, num_heads=2, num_classes=2, qk_norm=True
    )
    randomize_(model, seed=5)
    path = tmp_path / "qknorm.pth"
    torch.save(model.state_dict(), path)
    loaded = load_checkpoint(path, config={"heads": 2, "activation": "gelu"})
    assert loaded.config.qk_norm
    _check(model, loaded, images(1, 32, 32, seed=5))


def test_lightning_style_prefix_is_looked_under(tmp_path: Path) -> None:
    torch.manual_seed(6)
    model = timm.create_model(
        "vit_tiny_patch16_224", img_size=32, num_heads=3, num_classes=2, **TINY
    )
    randomize_(model, seed=6)
    path = tmp_path / "epoch=3.ckpt"
    sd = {f"model.{k}": v for k, v in model.state_dict().items()}
    torch.save({"state_dict": sd, "hyper_parameters": {"lr": 0.1}}, path)
    loaded = load_checkpoint(path, config={"heads": 3, "activation": "gelu"})
    assert loaded.notes[0] == "weights read from under the key prefix 'model.'"
    _check(model, loaded, images(1, 32, 32, seed=6))
