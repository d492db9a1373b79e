"""torchvision Swin state dicts open as vitviz's Swin with torchvision's logits at any size."""

from __future__ import annotations

import pytest
import torch
from swin_helpers import run_ours, tiny_torchvision_swin
from zoo_helpers import LOGIT_ATOL, assert_close, images

from vitviz.checkpoints import CheckpointError, load_checkpoint
from vitviz.kinds.swin.network import SwinTransformer


@pytest.mark.parametrize(
    ("version", "window", "size"),
    [
        (1, 7, (224, 224)),  # torchvision's default size for v1
        (2, 8, (256, 256)),  # and for v2 (window 8)
        (1, 7, (200, 200)),  # 50 -> 56 and 25 -> 28 padded, odd 25 merged
        (2, 8, (200, 200)),  # 50 -> 56 and 25 -> 32 padded
        *[(v, 4, (60, 52)) for v in (1, 2)],  # non-square, padded
        *[(v, 4, (16, 16)) for v in (1, 2)],  # maps smaller than a window: padded, no shift
    ],
)
def test_logits_match_torchvision(tmp_path, version, window, size):
    ref_model = tiny_torchvision_swin(window=window, version=version)
    path = tmp_path / "swin.pth"
    torch.save(ref_model.state_dict(), path)
    loaded = load_checkpoint(path)
    assert isinstance(loaded.model, SwinTransformer)
    assert loaded.family == "torchvision-swin"
    cfg = loaded.config
    assert cfg.version == version
    assert (cfg.dims, cfg.depths, cfg.heads, cfg.window_sizes) == (
        (24, 48),
        (2, 2),
        (2, 4),
        (window, window),
    )
    x = images(1 if max(size) > 100 else 2, *size)  # one image at the default size
    with torch.no_grad():
        ref = ref_model(x)
    logits, out = run_ours(loaded.model, x)
    assert_close("logits", ref, logits, LOGIT_ATOL)
    assert_close("logits (capture path)", ref, out.logits, LOGIT_ATOL)
    assert len(out.attentions) == 4
    for attn, layout in zip(out.attentions, out.layouts, strict=True):
        n = layout.window_area
        assert attn.shape == (x.shape[0], layout.num_windows, attn.shape[2], n, n)
        torch.testing.assert_close(attn.sum(-1), torch.ones_like(attn.sum(-1)))


def test_swin_preprocessing_and_classes(tmp_path):
    path = tmp_path / "swin.pth"
    torch.save(tiny_torchvision_swin(window=7, classes=1000).state_dict(), path)
    loaded = load_checkpoint(path)
    assert loaded.preprocessing.image_size == (224, 224)
    assert loaded.class_names[0] != "class 0"  # ImageNet names for 1000 classes


def test_missing_part_is_named(tmp_path):
    state = tiny_torchvision_swin().state_dict()
    del state["features.2.reduction.weight"]
    path = tmp_path / "broken.pth"
    torch.save(state, path)
    with pytest.raises(CheckpointError, match=r"features\.2\.reduction\.weight"):
        load_checkpoint(path)


@pytest.mark.parametrize("version", [1, 2])
def test_converted_to_the_native_format_and_back(tmp_path, version):
    """convert_checkpoint writes a Swin in vitviz's own format; it opens as the same Swin."""
    from vitviz.checkpoints import convert_checkpoint

    ref_model = tiny_torchvision_swin(window=4, version=version)
    source = tmp_path / "swin.pth"
    torch.save(ref_model.state_dict(), source)
    first = convert_checkpoint(source, tmp_path / "swin.safetensors")
    again = load_checkpoint(tmp_path / "swin.safetensors")
    assert again.family == "vitviz" and isinstance(again.model, SwinTransformer)
    assert again.config == first.config and again.config.version == version
    assert again.preprocessing == first.preprocessing
    x = images(1, 60, 52)
    with torch.no_grad():
        assert_close("logits", ref_model(x), again.model(x), LOGIT_ATOL)


def test_unknown_parts_and_bad_tables_are_refused_by_name(tmp_path):
    state = tiny_torchvision_swin().state_dict()
    state["features.1.0.attn.extra_gate"] = torch.zeros(3)
    path = tmp_path / "extra.pth"
    torch.save(state, path)
    with pytest.raises(CheckpointError, match=r"Swin can't express: features\.1\.0\.attn\.extra"):
        load_checkpoint(path)
    state = tiny_torchvision_swin().state_dict()
    state["features.3.0.attn.relative_position_bias_table"] = torch.zeros(50, 4)
    path = tmp_path / "table.pth"
    torch.save(state, path)
    with pytest.raises(
        CheckpointError, match=r"table\.pth: .*\(50, 4\) is not a \(\(2·window − 1\)²"
    ):
        load_checkpoint(path)


def test_settings_override_and_unknown_settings(tmp_path):
    path = tmp_path / "swin.pth"
    torch.save(tiny_torchvision_swin().state_dict(), path)
    loaded = load_checkpoint(path, config={"image_size": 64, "class_names": list("abcde")})
    assert loaded.config.image_size == (64, 64) and loaded.class_names == list("abcde")
    with pytest.raises(CheckpointError, match="unknown settings depth_scale"):
        load_checkpoint(path, config={"depth_scale": 2})


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_weights_stay_finite_on_padded_maps(tmp_path, version, dtype):
    """Half-precision weights on a padded size: v2's cosine attention normalises zero padding
    keys (1e-12 underflows in float16), so nothing turns NaN; logits near float32's."""
    ref_model = tiny_torchvision_swin(window=4, version=version)
    path = tmp_path / "swin.pth"
    torch.save(ref_model.state_dict(), path)
    loaded = load_checkpoint(path, dtype=dtype)
    x = images(1, 60, 52)
    with torch.no_grad():
        ref = ref_model(x)
        got = loaded.model(x.to(dtype)).float()
        explained = loaded.model.forward_explained(x.to(dtype))
    assert bool(torch.isfinite(got).all()) and all(
        bool(torch.isfinite(a).all()) for a in explained.attentions
    )
    assert_close("logits", ref, got, 0.1)
