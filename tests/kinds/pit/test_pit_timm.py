"""timm's PiT opened by vitviz, as a timm folder and as a bare state dict, plain and distilled,
with perturbed weights: logits within 1e-4 (relative) and every block's attention within 1e-5
of timm's own model, at 48 px (stage grids 5×5, 3×3, 2×2); the library check ran; a bare file
whose tensors are a timm name opens as it (noted), one whose tensors are none is refused with
the line asking for the head counts and stride; a file of an unexpected layout is named."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from pit_helpers import (
    BARE_SETTINGS,
    HEADS,
    SIZE,
    save_bare,
    save_folder,
    timm_attention_and_gradients,
    tiny_timm_pit,
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


@pytest.fixture(scope="module")
def refs() -> dict[bool, torch.nn.Module]:
    return {d: tiny_timm_pit(distilled=d, seed=3 + d) for d in (False, True)}


def _compare(loaded, ref: torch.nn.Module) -> None:
    x = images(2, SIZE, SIZE, seed=4)
    with torch.no_grad():
        want = ref(x)
        got = loaded.model(x)
    scale = assert_logits_close(got, want)
    want_logits, want_attn, _, _ = timm_attention_and_gradients(ref, x[:1])
    with torch.no_grad():
        out = loaded.model.forward_explained(x[:1], capture_attention=True)
    assert_logits_close(out.logits[0], want_logits, scale)
    assert_attentions_close([a[0] for a in out.attentions], want_attn, 4)
    assert [tuple(g) for g in out.stage_grids] == [(5, 5), (3, 3), (2, 2)]
    assert_checked_against_timm(loaded)


@pytest.mark.parametrize("distilled", [False, True], ids=["plain", "distilled"])
def test_a_timm_folder_opens_exactly(refs, tmp_path: Path, distilled: bool) -> None:
    loaded = load_checkpoint(save_folder(refs[distilled], tmp_path / "pit"))
    assert loaded.kind.name == "pit" and loaded.model.config.num_tokens == 1 + distilled
    assert tuple(loaded.preprocessing.image_size) == (SIZE, SIZE)
    _compare(loaded, refs[distilled])


@pytest.mark.parametrize("distilled", [False, True], ids=["plain", "distilled"])
def test_a_bare_state_dict_with_its_settings_opens_exactly(refs, tmp_path, distilled) -> None:
    path = save_bare(refs[distilled], tmp_path / "pit.pth", BARE_SETTINGS)
    _compare(load_checkpoint(path), refs[distilled])


def test_a_bare_state_dict_without_settings_asks_for_them(refs, tmp_path: Path) -> None:
    """Its widths are no timm name's: the head counts and the stem's stride are not in it."""
    path = save_bare(refs[False], tmp_path / "pit.pth")
    refused_in_one_line(path, "stage_heads", "stride", error=MissingSettingsError)


def test_a_bare_timm_name_is_recognised_by_its_tensors(tmp_path: Path) -> None:
    """pit_ti_distilled_224's own widths and depths (at 48 px): its heads and stride are timm's
    definition's, and the note says so."""
    from zoo_helpers import randomize_

    ref = timm.create_model("pit_ti_distilled_224", pretrained=False, num_classes=3, img_size=SIZE)
    ref = randomize_(ref, seed=7)
    loaded = load_checkpoint(save_bare(ref, tmp_path / "pit.pth"))
    assert loaded.model.config.heads == (2, 4, 8) and loaded.model.config.stride == 8
    assert any("recognised as timm's pit_ti_distilled_224" in n for n in loaded.notes)
    assert_opens_as_the_reference(loaded, ref, SIZE)


def test_a_tensor_vitviz_has_no_place_for_is_refused(refs, tmp_path: Path) -> None:
    state = {
        **refs[False].state_dict(),
        "transformers.0.blocks.0.attn.q_norm.weight": torch.ones(8),
    }
    path = save_state(state, tmp_path / "pit.pth", BARE_SETTINGS)
    with pytest.raises(CheckpointError, match="q_norm"):
        load_checkpoint(path)


def test_a_folders_tensors_are_aligned_as_timms_after_a_load(refs, tmp_path: Path) -> None:
    """A safetensors file's tensors are views into its buffer, some not 64-byte aligned; a
    conv's kernel (and so its float32 rounding) follows the alignment, so the walk's pit_xs
    folder once parted from timm by 2e-5 in attention. Every weight is held aligned."""
    loaded = load_checkpoint(save_folder(refs[True], tmp_path / "pit"))
    assert all(p.data_ptr() % 64 == 0 for p in loaded.model.parameters())


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (("drop", "transformers.1.blocks.0.mlp.fc1.weight"), "lacks"),
        (("drop", "pos_embed"), "position table"),
        (("drop", "transformers.0.blocks.0.norm1.weight"), "numbered"),
        (("set", "cls_token", torch.zeros(5)), "CLS"),
        (("set", "cls_token", torch.zeros(1, 3, 16)), "num_tokens"),
        (("set", "patch_embed.conv.weight", torch.zeros(16, 3, 16, 8)), "not square"),
    ],
)
def test_a_broken_pit_is_refused_in_one_line(refs, tmp_path: Path, change, words) -> None:
    state = broken(refs[False].state_dict(), change)
    refused_in_one_line(save_state(state, tmp_path / "pit.pth", BARE_SETTINGS), words)


def test_the_library_check_builds_the_files_sizes(refs, tmp_path: Path) -> None:
    """--arch names timm's pit_ti_224 (depths 2-6-4) for a PiT of depths 1-2-1: timm's PiT is
    built with the file's widths, depths and heads, so the check compares (its note says
    "checked against timm"), never refuses it."""
    path = save_bare(refs[False], tmp_path / "pit.pth")
    loaded = load_checkpoint(path, {"arch": "pit_ti_224", "stage_heads": list(HEADS)})
    assert_library_check_names(
        loaded, "pit_ti_224 with widths 16, 16, 32, depths 1, 2, 1, heads 2, 2, 4"
    )
