"""timm Swin state dicts open as vitviz's Swin: timm's logits and attention at any size."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file
from swin_helpers import run_ours, tiny_timm_swin
from zoo_helpers import ATTN_ATOL, LOGIT_ATOL, assert_close, images

from vitviz.checkpoints import CheckpointError, MissingSettingsError, load_checkpoint
from vitviz.kinds.swin.network import SwinTransformer


def timm_swin_reference(model, x):
    """timm's logits and each block's attention from its explicit path (softmax output)."""
    attn, handles = [], []
    for stage in model.layers:
        for block in stage.blocks:
            block.attn.fused_attn = False
            handles.append(
                block.attn.softmax.register_forward_hook(lambda _m, _i, o: attn.append(o))
            )
    with torch.no_grad():
        logits = model(x)
    for h in handles:
        h.remove()
    return logits, attn


@pytest.mark.parametrize(
    ("version", "img", "window"),
    [
        (1, 224, 7),  # timm's default size for swin_*
        (2, 256, 8),  # and for swinv2_*
        *[(v, 200, 7) for v in (1, 2)],  # 50 -> 56, 25 -> 28 padded after the roll, 25 merged
        *[(v, (60, 52), 4) for v in (1, 2)],  # non-square, padded
        *[(v, 24, 4) for v in (1, 2)],  # stage 1 is 3 × 3: timm clamps its window to 3
    ],
)
def test_logits_and_attention_match_timm(tmp_path, version, img, window):
    ref_model = tiny_timm_swin(img, window=window, version=version)
    path = tmp_path / "model.safetensors"
    save_file({k: v.contiguous() for k, v in ref_model.state_dict().items()}, str(path))
    if version == 2:  # the window is not in a v2's weights: timm's config.json says it
        config = {"architecture": "swinv2_tiny_window8_256", "model_args": {"window_size": window}}
        (tmp_path / "config.json").write_text(json.dumps(config))
    loaded = load_checkpoint(path)
    assert isinstance(loaded.model, SwinTransformer) and loaded.family == "timm-swin"
    assert loaded.config.version == version
    size = (img, img) if isinstance(img, int) else img
    x = images(1 if max(size) > 100 else 2, *size)  # one image at the default size
    ref_logits, ref_attn = timm_swin_reference(ref_model, x)
    logits, out = run_ours(loaded.model, x)
    assert_close("logits", ref_logits, logits, LOGIT_ATOL)
    assert len(ref_attn) == len(out.attentions) == 4
    for b, (r, got) in enumerate(zip(ref_attn, out.attentions, strict=True)):
        assert_close(f"attention block {b}", r.reshape(got.shape), got, ATTN_ATOL)


def test_original_layout_with_buffers(tmp_path):
    """Merging stored at the end of a stage, ``head``, and the index/mask buffers of old files."""
    ref_model = tiny_timm_swin(64, window=4)
    state = {}
    for k, v in ref_model.state_dict().items():
        if k.startswith("layers.1.downsample."):
            k = k.replace("layers.1.", "layers.0.")
        state[k.replace("head.fc.", "head.")] = v
    state["layers.0.blocks.0.attn.relative_position_index"] = torch.zeros(16, 16, dtype=torch.long)
    state["layers.0.blocks.1.attn_mask"] = torch.zeros(16, 16, 16)
    path = tmp_path / "swin_original.pth"
    torch.save(state, path)
    loaded = load_checkpoint(path)
    x = images(1, 64, 64)
    with torch.no_grad():
        assert_close("logits", ref_model(x), loaded.model(x), LOGIT_ATOL)
    assert any("original Swin layout" in n for n in loaded.notes)


def test_v2_window_from_the_architecture_name_or_asked(tmp_path):
    ref_model = tiny_timm_swin(64, window=8, version=2)
    path = tmp_path / "v2.pth"
    torch.save(ref_model.state_dict(), path)
    with pytest.raises(MissingSettingsError, match="window_sizes") as info:
        load_checkpoint(path)
    assert "[W, W]" in str(info.value) and "--arch" in str(info.value)  # no window guessed
    assert load_checkpoint(
        path, config={"arch": "swinv2_tiny_window8_256"}
    ).config.window_sizes == (
        8,
        8,
    )
    (tmp_path / "config.json").write_text(json.dumps({"architecture": "swinv2_tiny_window8_256"}))
    loaded = load_checkpoint(path)
    assert loaded.config.window_sizes == (8, 8)
    x = images(1, 64, 64)
    with torch.no_grad():
        assert_close("logits", ref_model(x), loaded.model(x), LOGIT_ATOL)


def test_bare_v1_image_size_follows_timms_window_rule(tmp_path):
    """No config.json: timm's Swins end with one window per image (window 12 -> 384 px), so a
    window-8 two-stage patch-4 model is taken at 64 px, and the note says so."""
    ref_model = tiny_timm_swin(64, window=8)
    path = tmp_path / "w8.pth"
    torch.save(ref_model.state_dict(), path)
    loaded = load_checkpoint(path)
    assert loaded.config.image_size == (64, 64)
    assert any(n.startswith("image size 64 assumed") for n in loaded.notes), loaded.notes


@pytest.mark.parametrize("version", [1, 2])
def test_the_library_check_builds_the_files_sizes_not_the_names(tmp_path, version):
    """A two-stage Swin of width 32 named by timm's four-stage tiny (its config.json, or
    --arch): timm's model is built with the file's widths, depths, heads and windows, so the
    check compares (its note says "checked against timm"), never refuses nor skips it."""
    ref_model = tiny_timm_swin(64, window=4, version=version)
    path = tmp_path / "model.safetensors"
    save_file({k: v.contiguous() for k, v in ref_model.state_dict().items()}, str(path))
    name = "swin_tiny_patch4_window7_224" if version == 1 else "swinv2_tiny_window8_256"
    config = {"architecture": name, "model_args": {"window_size": 4}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    loaded = load_checkpoint(path)
    checked = [n for n in loaded.notes if "checked against timm" in n]
    assert len(checked) == 1 and checked[0].startswith("checked against timm"), loaded.notes
    assert "depths 2, 2" in checked[0] and "window 4" in checked[0], checked[0]


def test_a_v2_name_for_v1_tensors_is_refused_in_one_line(tmp_path):
    """--arch of timm's Swin v2 on a v1 file: timm's SwinTransformerV2 does not take its
    tensors (the file lacks v2's cosine attention scale): refused in one line naming what."""
    ref_model = tiny_timm_swin(64, window=8, version=1)
    path = tmp_path / "v1.pth"
    torch.save(ref_model.state_dict(), path)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path, config={"arch": "swinv2_tiny_window8_256"})
    text = str(info.value)
    assert "swinv2_tiny_window8_256" in text and "does not take this file's tensors" in text
    assert "Missing key(s)" in text and "logit_scale" in text and "\n" not in text, text


def test_an_original_layout_file_is_checked_through_timms_own_conversion(tmp_path):
    """The original Microsoft layout (merging at the end of a stage, ``head``, the index and
    mask buffers) named by --arch: its tensors reach timm's model as timm's own loading
    converts them, so it is checked, not refused for the layout."""
    ref_model = tiny_timm_swin(64, window=4)
    state = {}
    for k, v in ref_model.state_dict().items():
        if k.startswith("layers.1.downsample."):
            k = k.replace("layers.1.", "layers.0.")
        state[k.replace("head.fc.", "head.")] = v
    state["layers.0.blocks.1.attn_mask"] = torch.zeros(16, 16, 16)
    path = tmp_path / "swin_original.pth"
    torch.save(state, path)
    loaded = load_checkpoint(path, config={"arch": "swin_tiny_patch4_window7_224"})
    checked = [n for n in loaded.notes if "checked against timm" in n]
    assert len(checked) == 1 and checked[0].startswith("checked against timm"), loaded.notes
