"""timm's TNT opened by vitviz, as a timm folder and as a bare state dict, current and legacy
layouts, with and without a q/k/v bias, with perturbed weights: logits within 1e-4 (relative)
and every block's outer and inner attention within 1e-5 of timm's own model; the library check
ran; a bare file whose tensors are a timm name's opens as it (noted); a bare file of no name
without its heads, the original release's layout and broken files are refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from timm_zoo_checks import (
    assert_attentions_close,
    assert_checked_against_timm,
    assert_logits_close,
    assert_own_file_opens_as_it_was,
    broken,
    refused_in_one_line,
    save_state,
)
from tnt_helpers import (
    SETTINGS,
    SIZE,
    named_timm_tnt,
    save_bare,
    save_folder,
    timm_logits_and_attention,
    tiny_timm_tnt,
)
from zoo_helpers import images

from vitviz.checkpoints import load_checkpoint

timm = pytest.importorskip("timm")

VARIANTS = [(False, False), (True, False), (False, True)]
IDS = ["current", "legacy", "qkv-bias"]


@pytest.fixture(scope="module")
def refs() -> dict[tuple[bool, bool], torch.nn.Module]:
    return {
        v: tiny_timm_tnt(legacy=v[0], qkv_bias=v[1], seed=3 + i) for i, v in enumerate(VARIANTS)
    }


def _compare(loaded, ref: torch.nn.Module, blocks: int) -> None:
    x = images(2, SIZE, SIZE, seed=4)
    want, outer, inner = timm_logits_and_attention(ref, x)
    with torch.no_grad():
        out = loaded.model.forward_explained(x)
    assert_logits_close(out.logits, want)
    assert_attentions_close(out.attentions, outer, blocks)
    assert_attentions_close(out.inner, inner, blocks)
    assert_checked_against_timm(loaded)


@pytest.mark.parametrize("variant", VARIANTS, ids=IDS)
def test_a_bare_state_dict_opens_exactly(refs, tmp_path: Path, variant) -> None:
    loaded = load_checkpoint(save_bare(refs[variant], tmp_path / "tnt.pth", SETTINGS))
    cfg = loaded.model.config
    assert loaded.kind.name == "tnt"
    assert (cfg.legacy, cfg.qkv_bias) == variant
    assert cfg.heads == (4,) and cfg.inner_heads == 2 and cfg.grid == (4, 4)
    assert cfg.pixel_grid == (2, 2) and cfg.image_size == (SIZE, SIZE)
    _compare(loaded, refs[variant], 2)
    probs = loaded.model.forward_explained(images(1, SIZE, SIZE, seed=1))
    assert tuple(probs.attentions[0].shape) == (1, 4, 17, 17)  # [CLS, 4×4 patches]
    assert tuple(probs.inner[0].shape) == (16, 2, 4, 4)  # per patch its 2×2 pixel tokens


@pytest.mark.parametrize("name", ["tnt_s_patch16_224", "tnt_s_legacy_patch16_224"])
def test_a_timm_folder_opens_exactly(tmp_path: Path, name: str) -> None:
    ref = named_timm_tnt(name)
    loaded = load_checkpoint(save_folder(ref, tmp_path / "tnt"))
    cfg = loaded.model.config
    assert cfg.legacy == ("legacy" in name) and cfg.heads == (6,) and cfg.inner_heads == 4
    assert tuple(loaded.preprocessing.image_size) == (SIZE, SIZE)
    assert tuple(loaded.preprocessing.mean) == (0.5, 0.5, 0.5)
    assert any(f"timm's {name}" in n for n in loaded.notes), loaded.notes
    _compare(loaded, ref, 12)


def test_a_folder_of_a_name_at_other_widths_opens_exactly(tmp_path: Path) -> None:
    """A folder whose model_args change the name's widths, heads and patch size."""
    ref = timm.create_model(
        "tnt_b_patch16_224", pretrained=False, num_classes=3, img_size=SIZE, embed_dim=24,
        inner_dim=8, depth=2, num_heads_outer=3, num_heads_inner=2, patch_size=8,
    )  # fmt: skip
    from zoo_helpers import randomize_

    ref = randomize_(ref, seed=7).eval()
    args = dict(embed_dim=24, inner_dim=8, depth=2, num_heads_outer=3, num_heads_inner=2)
    loaded = load_checkpoint(save_folder(ref, tmp_path / "tnt", patch_size=8, **args))
    assert loaded.model.config.heads == (3,) and loaded.model.config.patch_size == 8
    _compare(loaded, ref, 2)


def test_a_bare_timm_name_is_recognised_by_its_tensors(tmp_path: Path) -> None:
    ref = named_timm_tnt("tnt_b_patch16_224", seed=5)
    loaded = load_checkpoint(save_bare(ref, tmp_path / "tnt.pth"))
    assert any("recognised as timm's tnt_b_patch16_224" in n for n in loaded.notes)
    assert loaded.model.config.heads == (10,)
    _compare(loaded, ref, 12)


def test_a_bare_file_of_no_name_asks_for_its_heads(refs, tmp_path: Path) -> None:
    path = save_bare(refs[(False, False)], tmp_path / "tnt.pth", {"patch_size": 8})
    refused_in_one_line(path, "heads and inner_heads", "--arch")


def test_the_heads_given_are_the_ones_read(refs, tmp_path: Path) -> None:
    """Settings' heads build vitviz's network and the library check's timm TNT alike."""
    settings = {**SETTINGS, "heads": 2, "inner_heads": 4}
    loaded = load_checkpoint(save_bare(refs[(False, False)], tmp_path / "tnt.pth", settings))
    out = loaded.model.forward_explained(images(1, SIZE, SIZE, seed=2))
    assert out.attentions[0].shape[1] == 2 and out.inner[0].shape[1] == 4
    assert_checked_against_timm(loaded)


def test_a_reading_timm_computes_otherwise_is_refused(refs, tmp_path: Path, monkeypatch) -> None:
    """The library check refuses what vitviz would show wrong: the legacy layout's per-token
    norm read as the current one's in vitviz's network only."""
    from vitviz.kinds.tnt import network

    def per_patch(self, pixels, patches):
        B = pixels.shape[0] // patches
        return self.proj(self.norm1_proj(pixels).reshape(B, patches, -1) * 1.01)

    monkeypatch.setattr(network.TNTBlock, "pixels_to_patch", per_patch)
    path = save_bare(refs[(True, False)], tmp_path / "tnt.pth", SETTINGS)
    refused_in_one_line(path, "differs from timm")


def test_the_original_release_layout_is_refused_by_name(tmp_path: Path) -> None:
    state = {"inner_pos": torch.zeros(1, 16, 24), "outer_pos": torch.zeros(1, 197, 384),
             "outer_tokens": torch.zeros(1, 1, 384)}  # fmt: skip
    refused_in_one_line(save_state(state, tmp_path / "tnt.pth"), "original TNT release")


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (("drop", "blocks.1.mlp.fc1.weight"), "mlp.fc1.weight"),
        (("drop", "blocks.0.norm_out.weight"), "numbered"),
        (("drop", "pixel_pos"), "lacks pixel_pos"),
        (("set", "patch_pos", torch.zeros(1, 16, 32)), "no square"),
        (("set", "pixel_embed.proj.weight", torch.zeros(8, 3, 5, 5)), "7×7"),
        (("set", "pixel_pos", torch.zeros(1, 8, 3, 3)), "pixel sub-grid"),
    ],
)
def test_a_broken_tnt_is_refused_in_one_line(refs, tmp_path: Path, change, words) -> None:
    state = broken(refs[(False, False)].state_dict(), change)
    refused_in_one_line(save_state(state, tmp_path / "tnt.pth", SETTINGS), words)


def test_vitvizs_own_file_of_a_tnt_opens_as_it_was(refs, tmp_path: Path) -> None:
    """``vitviz-cli convert`` writes the config beside the weights; the file opens to the same
    network; ``vitviz-cli info`` describes both."""
    ref = refs[(True, False)]
    bare = save_bare(ref, tmp_path / "tnt.pth", SETTINGS)
    assert_own_file_opens_as_it_was(ref, bare, tmp_path, SIZE)


def test_a_norm_eps_of_the_settings_is_the_one_checked(tmp_path: Path) -> None:
    """A TNT trained with another LayerNorm eps, said in its settings: vitviz reads it and the
    library check builds timm's TNT (unnamed, and a folder's name) with that eps too."""
    from tnt_helpers import TINY
    from zoo_helpers import randomize_

    eps = {"norm_eps": 0.5}
    ref = timm.create_model("tnt_s_patch16_224", pretrained=False, num_classes=3, **TINY)
    for module in ref.modules():  # every norm's eps, as timm's norm_layer keyword sets it
        if isinstance(module, torch.nn.LayerNorm):
            module.eps = 0.5
    ref = randomize_(ref, seed=6).eval()
    bare = load_checkpoint(save_bare(ref, tmp_path / "tnt.pth", {**SETTINGS, **eps}))
    args = {k: v for k, v in TINY.items() if k != "img_size"}  # the folder's model_args
    named = load_checkpoint(save_folder(ref, tmp_path / "tnt", **args), eps)
    for loaded in (bare, named):
        assert loaded.model.config.norm_eps == 0.5
        assert any("LayerNorm eps 0.5" in n for n in loaded.notes), loaded.notes
        _compare(loaded, ref, 2)
