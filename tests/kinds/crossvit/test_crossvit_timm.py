"""timm's CrossViT opened by vitviz, as a timm folder and as a bare state dict, with perturbed
weights: logits within 1e-4 (relative) and every attention layer's (both branches' blocks and the
cross-attention of each CLS) within 1e-5 of timm's own model, at 120 px; the plain stem with
branch 1 resized by timm's 224/240, the dagger's conv stem, mean pooling, no head; the library
check ran; a bare file whose tensors are a timm name opens as it (noted), one whose tensors are
none is refused asking for --arch; broken files are refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from crossvit_helpers import (
    LAYERS,
    SIZE,
    save_bare,
    save_folder,
    timm_attention,
    tiny_timm_crossvit,
)
from timm_zoo_checks import (
    assert_attentions_close,
    assert_checked_against_timm,
    assert_logits_close,
    assert_opens_as_the_reference,
    broken,
    refused_in_one_line,
    save_state,
)
from zoo_helpers import images

from vitviz.checkpoints import MissingSettingsError, load_checkpoint

timm = pytest.importorskip("timm")

VARIANTS = {
    "plain": dict(name="crossvit_tiny_240"),
    "dagger": dict(name="crossvit_9_dagger_240"),
    "avg-pool": dict(name="crossvit_small_240", global_pool="avg"),
    "headless": dict(name="crossvit_tiny_240", num_classes=0),  # the two CLS features side by side
}


@pytest.fixture(scope="module")
def refs() -> dict[str, torch.nn.Module]:
    return {k: tiny_timm_crossvit(seed=3 + i, **v) for i, (k, v) in enumerate(VARIANTS.items())}


def _compare(loaded, ref: torch.nn.Module) -> None:
    x = images(2, SIZE, SIZE, seed=4)
    with torch.no_grad():
        want = ref(x)
        got = loaded.model(x)
    scale = assert_logits_close(got, want)
    want_logits, want_attn = timm_attention(ref, x[:1])
    with torch.no_grad():
        out = loaded.model.forward_explained(x[:1])
    assert_logits_close(out.logits, want_logits, scale)
    assert_attentions_close(out.attentions, want_attn, len(LAYERS))
    for a, (how, _branch) in zip(out.attentions, LAYERS, strict=True):
        assert (a.shape[2] == 1) == (how == "cross")
    assert_checked_against_timm(loaded)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_a_timm_folder_opens_exactly(refs, tmp_path: Path, variant: str) -> None:
    loaded = load_checkpoint(save_folder(refs[variant], tmp_path / "crossvit"))
    cfg = loaded.model.config
    assert loaded.kind.name == "crossvit" and cfg.multi_conv == (variant == "dagger")
    assert cfg.branch_sizes == (SIZE, 112)
    assert tuple(loaded.preprocessing.image_size) == (SIZE, SIZE)
    _compare(loaded, refs[variant])


def test_a_bare_timm_name_is_recognised_by_its_tensors(tmp_path: Path) -> None:
    """crossvit_9_240's own widths and blocks (at 120 px): its heads and branch 1's size are
    timm's definition's, and the note says so."""
    from zoo_helpers import randomize_

    ref = timm.create_model("crossvit_9_240", pretrained=False, num_classes=3, img_size=SIZE)
    ref = randomize_(ref, seed=7).eval()
    loaded = load_checkpoint(save_bare(ref, tmp_path / "crossvit.pth"))
    cfg = loaded.model.config
    assert cfg.heads == (4, 4) and cfg.branch_sizes == (SIZE, 112) and cfg.dims == (128, 256)
    assert any("recognised as timm's crossvit_9_240" in n for n in loaded.notes)
    assert_opens_as_the_reference(loaded, ref, SIZE)
    assert_checked_against_timm(loaded)


def test_a_bare_file_of_no_timm_name_asks_for_arch(refs, tmp_path: Path) -> None:
    path = save_bare(refs["plain"], tmp_path / "crossvit.pth")
    refused_in_one_line(path, "--arch", "crossvit_*", error=MissingSettingsError)


def test_a_folders_tensors_are_aligned(refs, tmp_path: Path) -> None:
    loaded = load_checkpoint(save_folder(refs["dagger"], tmp_path / "crossvit"))
    assert all(p.data_ptr() % 64 == 0 for p in loaded.model.parameters())


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (("drop", "blocks.1.blocks.1.0.mlp.fc1.weight"), "lacks"),
        (("drop", "blocks.0.fusion.1.attn.wq.weight"), "lacks"),
        (("drop", "blocks.0.blocks.0.0.norm1.weight"), "numbered"),
        (("set", "pos_embed_1", torch.zeros(1, 40, 48)), "no square grid"),
        (("set", "pos_embed_0", torch.zeros(1, 51, 24)), "no square grid"),
        (("set", "pos_embed_1", torch.zeros(1, 37, 48)), "position tables"),
        (("set", "blocks.0.fusion.0.attn.wq.weight", torch.zeros(48, 24)), "shape"),
    ],
)
def test_a_broken_crossvit_is_refused_in_one_line(refs, tmp_path: Path, change, words) -> None:
    state = broken(refs["plain"].state_dict(), change)
    path = save_state(state, tmp_path / "crossvit.pth", {"arch": "crossvit_tiny_240"})
    refused_in_one_line(path, words)


def test_a_native_file_keeps_it_and_info_describes_it(refs, tmp_path: Path, capsys) -> None:
    """``vitviz-cli convert`` writes vitviz's own file; it opens as the same CrossViT (the
    same logits) and ``vitviz-cli info`` describes it."""
    from vitviz import cli

    folder = save_folder(refs["dagger"], tmp_path / "crossvit")
    native = tmp_path / "crossvit.safetensors"
    assert cli.main(["convert", str(folder), str(native)]) == 0
    loaded, again = load_checkpoint(folder), load_checkpoint(native)
    assert again.kind.name == "crossvit" and again.model.config == loaded.model.config
    x = images(1, SIZE, SIZE, seed=6)
    with torch.no_grad():
        torch.testing.assert_close(again.model(x), loaded.model(x), rtol=1e-5, atol=1e-6)
    capsys.readouterr()
    assert cli.main(["info", str(native)]) == 0
    out = capsys.readouterr().out
    assert "CrossViT, widths 24/48, heads 2/4, patches 12/16" in out and "patch 12" in out
