"""timm's LeViT opened by vitviz, as a timm folder and as a bare state dict, distilled and
plain, in timm's Linear layout and its conv layout (levit_conv_*), Hardswish and SiLU, with
perturbed weights and BatchNorm statistics: logits within 1e-4 (relative) and every attention
layer's probabilities within 1e-5 of timm's own model, at 64 px (grids 4×4, 2×2, 1×1); the
library check ran; a bare file whose tensors are a timm name opens as it (noted), one whose
tensors are none is refused with the line asking for the activation; broken files are refused
in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from levit_helpers import (
    BARE_SETTINGS,
    GRIDS,
    SIZE,
    randomize_levit_,
    save_bare,
    save_folder,
    timm_attention_and_gradients,
    tiny_timm_levit,
)
from timm_zoo_checks import (
    assert_attentions_close,
    assert_checked_against_timm,
    assert_library_check_names,
    assert_logits_close,
    assert_opens_as_the_reference,
    broken,
    refused_in_one_line,
    save_state,
)
from zoo_helpers import images

from vitviz.checkpoints import CheckpointError, MissingSettingsError, load_checkpoint

timm = pytest.importorskip("timm")

CASES = {
    "distilled": dict(distilled=True),
    "plain": dict(distilled=False),
    "conv": dict(conv=True),
    "silu": dict(distilled=False, act_layer="silu"),
    "s8": dict(distilled=False, act_layer="silu", stem_type="s8"),  # levit_*_s8's stem
}


@pytest.fixture(scope="module")
def refs() -> dict[str, torch.nn.Module]:
    return {name: tiny_timm_levit(seed=3 + i, **kw) for i, (name, kw) in enumerate(CASES.items())}


def _compare(loaded, ref: torch.nn.Module) -> None:
    x = images(2, SIZE, SIZE, seed=4)
    with torch.no_grad():
        want = ref(x)
        got = loaded.model(x)
    scale = assert_logits_close(got, want)
    want_logits, want_attn, _, _ = timm_attention_and_gradients(ref, x[:1])
    assert_logits_close(want_logits, want[0], scale)  # the hooks' pass
    with torch.no_grad():
        out = loaded.model.forward_explained(x[:1], capture_attention=True)
    assert_logits_close(out.logits[0], want[0], scale)
    assert_attentions_close([a[0] for a in out.attentions], want_attn, 6)
    s8 = loaded.model.config.stem_stride == 8
    assert [tuple(g) for g in out.stage_grids] == ([(8, 8), (4, 4), (2, 2)] if s8 else GRIDS)
    assert_checked_against_timm(loaded)


@pytest.mark.parametrize("case", list(CASES))
def test_a_timm_folder_opens_exactly(refs, tmp_path: Path, case: str) -> None:
    loaded = load_checkpoint(save_folder(refs[case], tmp_path / "levit"))
    cfg = loaded.model.config
    assert loaded.kind.name == "levit" and cfg.distilled == CASES[case].get("distilled", True)
    silu = case in ("silu", "s8")
    assert cfg.conv == (case == "conv") and cfg.activation == ("silu" if silu else "hard_swish")
    assert tuple(loaded.preprocessing.image_size) == (SIZE, SIZE)
    _compare(loaded, refs[case])


@pytest.mark.parametrize("case", list(CASES))
def test_a_bare_state_dict_with_its_settings_opens_exactly(refs, tmp_path, case) -> None:
    settings = {"activation": "silu"} if case in ("silu", "s8") else BARE_SETTINGS
    _compare(load_checkpoint(save_bare(refs[case], tmp_path / "levit.pth", settings)), refs[case])


def test_a_bare_state_dict_without_settings_asks_for_them(refs, tmp_path: Path) -> None:
    """Its widths are no timm name's: the activation is not in it."""
    path = save_bare(refs["plain"], tmp_path / "levit.pth")
    refused_in_one_line(path, "activation", "--arch", error=MissingSettingsError)


@pytest.mark.parametrize("name", ["levit_128s", "levit_conv_128s"])
def test_a_bare_timm_name_is_recognised_by_its_tensors(tmp_path: Path, name: str) -> None:
    """levit_128s's own widths, depths, heads and key width (at 64 px): its activation is
    timm's definition's, and the note says so."""
    ref = timm.create_model(name, pretrained=False, num_classes=3, img_size=SIZE)
    ref = randomize_levit_(ref, seed=7)
    loaded = load_checkpoint(save_bare(ref, tmp_path / "levit.pth"))
    assert loaded.model.config.heads == (4, 6, 8) and loaded.model.config.activation == "hard_swish"
    assert any(f"recognised as timm's {name}" in n for n in loaded.notes), loaded.notes
    assert_opens_as_the_reference(loaded, ref, SIZE)


def test_a_tensor_vitviz_has_no_place_for_is_refused(refs, tmp_path: Path) -> None:
    state = {**refs["plain"].state_dict(), "stages.0.blocks.0.attn.q_norm.weight": torch.ones(8)}
    path = save_state(state, tmp_path / "levit.pth", BARE_SETTINGS)
    with pytest.raises(CheckpointError, match="q_norm"):
        load_checkpoint(path)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (("drop", "stages.1.blocks.0.mlp.ln1.linear.weight"), "lacks"),
        (("drop", "stages.0.blocks.0.attn.attention_biases"), "numbered"),
        (("drop", "stem.conv4.linear.weight"), "stem"),
        (("set", "stages.0.blocks.0.attn.attention_biases", torch.zeros(2, 15)), "square"),
        (("set", "stages.1.blocks.1.attn.attention_biases", torch.zeros(3, 9)), "bias table"),
        (("set", "stages.1.downsample.mlp.ln1.linear.weight", torch.zeros(40, 24)), "express"),
        (("set", "stages.1.downsample.attn_downsample.kv.linear.weight", torch.zeros(8)), "kv"),
    ],
)
def test_a_broken_levit_is_refused_in_one_line(refs, tmp_path: Path, change, words) -> None:
    state = broken(refs["plain"].state_dict(), change)
    refused_in_one_line(save_state(state, tmp_path / "levit.pth", BARE_SETTINGS), words)


def test_the_library_check_builds_the_files_sizes(tmp_path: Path) -> None:
    """--arch names timm's levit_128s (widths 128-256-384, depths 2-3-4) for a LeViT of widths
    16-24-32, depths 1-2-1: timm's Levit is built with the file's sizes, so the check compares
    (its note says "checked against timm"), never refuses it."""
    path = tmp_path / "levit.pth"
    torch.save(tiny_timm_levit().state_dict(), path)
    loaded = load_checkpoint(path, {"arch": "levit_128s"})
    assert_library_check_names(
        loaded, "levit_128s with widths 16, 24, 32, depths 1, 2, 1, heads 2, 3, 4"
    )
