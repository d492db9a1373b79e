"""timm's MobileViT opens as the MobileViT kind, bare and folder, exactly: logits 1e-4 relative
and every transformer layer's attention 1e-5 against timm's own model with perturbed weights
and BatchNorm statistics (at the trained size, and at one whose stage maps are no multiple of
the patch: the bilinear resize); the library check ran; settings asked for in one line;
broken files refused in one line; MobileViTV2 refused by name."""

from __future__ import annotations

import pytest
import torch
from mobilevit_helpers import (
    BARE_SETTINGS,
    SIZE,
    save_bare,
    save_folder,
    timm_attention,
    timm_xxs,
    tiny_timm_mobilevit,
)

from vitviz.checkpoints import load_checkpoint
from vitviz.checkpoints.errors import CheckpointError
from vitviz.kinds.mobilevit.network import MobileViTNet

pytest.importorskip("timm")


@pytest.fixture(scope="module")
def tiny():
    return tiny_timm_mobilevit(seed=3)


@pytest.fixture(scope="module")
def xxs():
    return timm_xxs(seed=4)


def _exact(ours: torch.nn.Module, theirs: torch.nn.Module, size: int) -> None:
    x = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(size))
    want, attn = timm_attention(theirs, x)
    with torch.no_grad():
        out = ours.forward_explained(x)
    rel = float((out.logits - want).abs().max() / want.abs().max())
    assert rel < 1e-4, rel
    assert len(out.attentions) == len(attn) > 0
    for a, b in zip(out.attentions, attn, strict=True):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


def test_a_bare_tiny_file_with_its_settings_is_timms_model(tiny, tmp_path) -> None:
    loaded = load_checkpoint(save_bare(tiny, tmp_path / "tiny.pth", BARE_SETTINGS))
    assert isinstance(loaded.model, MobileViTNet)
    assert any("checked against timm" in n and "ByobNet" in n for n in loaded.notes)
    _exact(loaded.model, tiny, SIZE)
    _exact(loaded.model, tiny, 40)  # maps 20, 10, 5 -> 6, 3 -> 4: the bilinear resize


def test_a_bare_file_whose_mlp_width_is_no_float_multiple_is_timms_model(tmp_path) -> None:
    # transformer widths 22, 24 with MLPs 30, 48: timm's int(22 · 30 / 22) is 29, one short
    model = tiny_timm_mobilevit(seed=8, dims=(22, 24), mlp_ratios=(30.5 / 22, 2.0))
    hidden = [
        b.transformer[0].mlp.fc1.out_features for b in (model.stages[2][1], model.stages[3][1])
    ]
    assert hidden == [30, 48]
    loaded = load_checkpoint(save_bare(model, tmp_path / "w22.pth", BARE_SETTINGS))
    assert any("checked against timm" in n and "ByobNet" in n for n in loaded.notes)
    _exact(loaded.model, model, SIZE)


def test_the_not_checked_note_names_only_the_reason_that_holds(tiny, tmp_path) -> None:
    settings = {**BARE_SETTINGS, "norm_eps": 1e-6}
    loaded = load_checkpoint(save_bare(tiny, tmp_path / "eps.pth", settings))
    (note,) = [n for n in loaded.notes if n.startswith("not checked against timm")]
    assert "LayerNorm eps 1e-5 (this file: LayerNorm 1e-06)" in note, note
    assert "bottleneck" not in note and "BatchNorm" not in note and "qkv" not in note, note


def test_timms_folder_and_bare_mobilevit_xxs_are_timms_model(xxs, tmp_path) -> None:
    folder = load_checkpoint(save_folder(xxs, tmp_path / "xxs"))
    bare = load_checkpoint(save_bare(xxs, tmp_path / "xxs.safetensors.pth"))
    assert any("recognised as timm's mobilevit_xxs" in n for n in bare.notes)
    for loaded in (folder, bare):
        assert any("checked against timm" in n and "mobilevit_xxs" in n for n in loaded.notes)
        assert loaded.model.config.layer_heads == [4] * 9
        _exact(loaded.model, xxs, SIZE)


def test_a_bare_file_of_no_timm_name_asks_for_its_settings_in_one_line(tiny, tmp_path) -> None:
    with pytest.raises(CheckpointError) as refused:
        load_checkpoint(save_bare(tiny, tmp_path / "tiny.pth"))
    line = str(refused.value)
    assert "\n" not in line and "stage_heads" in line and "patch_size" in line


@pytest.mark.parametrize("damage", ["missing", "shape"])
def test_a_broken_file_is_refused_in_one_line(tiny, tmp_path, damage) -> None:
    state = dict(tiny.state_dict())
    key = "stages.2.1.conv_fusion.conv.weight"
    if damage == "missing":
        del state[key]
    else:
        state[key] = state[key][:, :-1]
    path = tmp_path / "broken.pth"
    torch.save(state, path)
    path.with_name(path.name + ".vitviz.json").write_text(__import__("json").dumps(BARE_SETTINGS))
    with pytest.raises(CheckpointError) as refused:
        load_checkpoint(path)
    line = str(refused.value)
    assert "\n" not in line and "conv_fusion" in line


def test_mobilevitv2_is_refused_by_name(tmp_path) -> None:
    import timm

    for name, words in (("mobilevitv2_050", "MobileViTV2"),):
        with torch.device("meta"):
            model = timm.create_model(name, num_classes=3)
        state = {k: torch.zeros(v.shape, dtype=v.dtype) for k, v in model.state_dict().items()}
        path = tmp_path / f"{name}.pth"
        torch.save(state, path)
        model = timm.create_model(name, num_classes=3)
        folder = save_folder(model, tmp_path / name)
        for form in (path, folder):
            with pytest.raises(CheckpointError) as refused:
                load_checkpoint(form)
            line = str(refused.value)
            assert "\n" not in line and f"this is timm's {words}" in line, line
