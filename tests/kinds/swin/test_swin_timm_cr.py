"""timm SwinV2-CR (swinv2_cr_*) files open as vitviz's Swin: timm's logits (1e-4 relative) and
every block's attention (1e-5), folder and bare, plain, ``_ns_`` and period extra norms, padded
and clamped windows; what a file can't say is asked for, what vitviz can't model is refused in
one line."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from safetensors.torch import save_file
from swin_helpers import timm_cr_attention, tiny_timm_swin_cr
from timm.models import save_for_hf
from zoo_helpers import images

from vitviz.checkpoints import CheckpointError, MissingSettingsError, load_checkpoint
from vitviz.kinds.swin.families.timm_cr import timm_norm_args
from vitviz.kinds.swin.network import SwinTransformer

LOGITS_RTOL, ATTN_ATOL = 1e-4, 1e-5


def sharpen_(model):
    """Logit scales from 2 to 6 (above log 100 = 4.6: timm's clamp bites), attention peaked."""
    with torch.no_grad():
        for stage in model.stages:
            for block in stage.blocks:
                scale = block.attn.logit_scale
                scale.copy_(torch.linspace(2.0, 6.0, scale.numel()))
    return model


def attention_differences(ref, model, x):
    """Each block's max |ours - timm's| attention; asserts the logits on the way."""
    ref_logits, ref_attn = timm_cr_attention(ref, x)
    with torch.no_grad():
        logits, out = model(x), model.forward_explained(x)
    scale = float(ref_logits.abs().max())
    assert float((logits - ref_logits).abs().max()) / scale < LOGITS_RTOL
    assert float((out.logits - ref_logits).abs().max()) / scale < LOGITS_RTOL
    assert len(ref_attn) == len(out.attentions) == 4
    return [
        float((theirs.reshape(ours.shape) - ours).abs().max())
        for theirs, ours in zip(ref_attn, out.attentions, strict=True)
    ]


def assert_matches_timm(ref, loaded, x):
    """Logits (fused and explained paths) within 1e-4 of timm's, each block's attention 1e-5.
    Sharpened cosine attention (logit scale up to 100) magnifies float32's rounding, whose order
    depends on the CPU and its thread count: where float32 misses 1e-5, both models in float64
    must agree to 1e-9 (the same function, as benchmarks/timm_walk.py's exact-float64 row)."""
    diffs = attention_differences(ref, loaded.model, x)
    if max(diffs) >= ATTN_ATOL:
        diffs64 = attention_differences(
            copy.deepcopy(ref).double(), copy.deepcopy(loaded.model).double(), x.double()
        )
        assert max(diffs64) < 1e-9, f"float32 attention {diffs}, float64 {diffs64}"


@pytest.mark.parametrize(
    ("name", "img", "extra"),
    [
        ("swinv2_cr_tiny_224", 64, {}),  # 16 × 16 and 8 × 8 grids, windows of 4
        ("swinv2_cr_tiny_ns_224", 64, {}),  # an extra norm at each stage's end
        ("swinv2_cr_huge_224", 64, {"extra_norm_period": 1}),  # huge's period, every block
        ("swinv2_cr_tiny_224", (60, 52), {}),  # 15 × 13 rolled then padded to 16 × 16
        ("swinv2_cr_tiny_224", 24, {}),  # stage 1 is 3 × 3: the window clamped to 3, no shift
    ],
)
def test_folder_matches_timm(tmp_path, name, img, extra):
    ref = sharpen_(tiny_timm_swin_cr(img, name=name, seed=3, **extra))
    save_for_hf(ref, tmp_path / "cr", safe_serialization=True)
    loaded = load_checkpoint(tmp_path / "cr")
    assert isinstance(loaded.model, SwinTransformer) and loaded.family == "timm-swinv2-cr"
    assert loaded.config.cr and loaded.config.window_sizes == (4, 4)
    assert any("checked against timm" in n for n in loaded.notes), loaded.notes
    size = (img, img) if isinstance(img, int) else img
    assert_matches_timm(ref, loaded, images(2, *size))


def test_extra_norms_are_read_off_the_weights(tmp_path):
    for name, extra, want in (
        ("swinv2_cr_tiny_224", {}, (3,)),  # the last block: timm's final norm
        ("swinv2_cr_tiny_ns_224", {}, (1, 3)),
        ("swinv2_cr_huge_224", {"extra_norm_period": 1}, (0, 1, 2, 3)),
    ):
        save_for_hf(tiny_timm_swin_cr(64, name=name, **extra), tmp_path / name)
        loaded = load_checkpoint(tmp_path / name)
        assert loaded.config.extra_norm_blocks == want
        assert not loaded.config.final_norm
    assert timm_norm_args((9, 15, 21, 23), (2, 2, 18, 2)) == {
        "extra_norm_period": 6,
        "extra_norm_stage": False,
    }
    assert timm_norm_args((1, 3, 21, 23), (2, 2, 18, 2))["extra_norm_stage"]
    assert timm_norm_args((0,), (2, 2)) is None  # not the last block: no timm setting does it


def test_timms_own_window_is_the_grid_over_eight(tmp_path):
    """No window_size: timm's is the patch grid ÷ 8 (128 px, patch 4: 32 ÷ 8 = 4)."""
    ref = sharpen_(tiny_timm_swin_cr(128, window=None, seed=4))
    save_for_hf(ref, tmp_path / "cr")
    loaded = load_checkpoint(tmp_path / "cr")
    assert loaded.config.window_sizes == (4, 4)
    assert_matches_timm(ref, loaded, images(1, 128, 128))


def test_bare_file_asks_for_the_image_size_then_opens(tmp_path):
    ref = sharpen_(tiny_timm_swin_cr(64, window=None, seed=5))  # window 16 ÷ 8 = 2
    path = tmp_path / "cr.safetensors"
    save_file({k: v.contiguous() for k, v in ref.state_dict().items()}, str(path))
    with pytest.raises(MissingSettingsError, match="image_size") as info:
        load_checkpoint(path)
    assert "--arch" in str(info.value) and "\n" not in str(info.value)
    loaded = load_checkpoint(path, config={"image_size": 64})
    assert loaded.config.window_sizes == (2, 2) and loaded.config.image_size == (64, 64)
    assert any("checked against timm" in n for n in loaded.notes), loaded.notes
    assert_matches_timm(ref, loaded, images(2, 64, 64))


def test_bare_file_with_arch_takes_its_size(tmp_path):
    """--arch swinv2_cr_tiny_384: 384 px, windows 96 ÷ 8 = 12; a pth opens like a safetensors."""
    ref = tiny_timm_swin_cr(384, window=None, seed=6, name="swinv2_cr_tiny_384")
    path = tmp_path / "cr.pth"
    torch.save(ref.state_dict(), path)
    loaded = load_checkpoint(path, config={"arch": "swinv2_cr_tiny_384"})
    assert loaded.config.image_size == (384, 384) and loaded.config.window_sizes == (12, 12)
    x = images(1, 384, 384)
    with torch.no_grad():
        theirs, ours = ref(x), loaded.model(x)
    assert float((ours - theirs).abs().max()) / float(theirs.abs().max()) < LOGITS_RTOL


def test_non_square_windows_and_always_partition_are_refused_by_name(tmp_path):
    ref = tiny_timm_swin_cr(64, window=None)
    save_for_hf(ref, tmp_path / "cr")
    config_path = tmp_path / "cr" / "config.json"
    config = json.loads(config_path.read_text())
    for args, words in (
        ({"window_size": [4, 2]}, "non-square windows (4×2, 4×2)"),
        ({"always_partition": True}, "always_partition=True"),
    ):
        config["model_args"] = {**config["model_args"], **args}
        config_path.write_text(json.dumps(config))
        with pytest.raises(CheckpointError, match="which vitviz does not model") as info:
            load_checkpoint(tmp_path / "cr")
        assert words in str(info.value) and "\n" not in str(info.value)
        for key in args:
            del config["model_args"][key]


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ("stages.1.blocks.0.attn.meta_mlp.fc2.bias", "is missing"),
        ("stages.0.blocks.1.attn.qkv.weight", "does not fit"),
    ],
)
def test_broken_files_are_refused_in_one_line(tmp_path, change, words):
    state = dict(tiny_timm_swin_cr(64).state_dict())
    if words == "is missing":
        del state[change]
    else:
        state[change] = state[change][:-3]
    path = tmp_path / "broken.pth"
    torch.save(state, path)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path, config={"image_size": 64, "window_sizes": [4, 4]})
    message = str(info.value)
    assert change.rsplit(".", 1)[0] in message and "\n" not in message, message


def test_vitviz_own_format_keeps_a_swinv2_cr(tmp_path):
    """Saved by vitviz (``save_checkpoint``) and opened again: still a SwinV2-CR, same logits."""
    from vitviz.checkpoints import save_checkpoint

    ref = tiny_timm_swin_cr(64, name="swinv2_cr_tiny_ns_224", seed=7)
    save_for_hf(ref, tmp_path / "cr")
    path = save_checkpoint(load_checkpoint(tmp_path / "cr").model, tmp_path / "own.safetensors")
    again = load_checkpoint(path)
    assert again.config.cr and again.config.extra_norm_blocks == (1, 3)
    assert not again.config.final_norm
    x = images(1, 64, 64)
    with torch.no_grad():
        theirs, ours = ref(x), again.model(x)
    assert float((ours - theirs).abs().max()) / float(theirs.abs().max()) < LOGITS_RTOL
