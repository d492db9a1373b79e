"""Bare timm state dicts no timm name has, whose layout timm architectures computing differently
share (a review): a Perception Encoder (rotary, Eva class: norm_pre, no patch bias, an
attention pool or no final norm), a rotary ViT without LayerScale or a position table, a
CLIP-like ViT (eps 1e-5, GELU or QuickGELU). Each opened as the common ViT once given ``heads``,
with wrong logits; now each is refused in one line naming the candidates and ``--arch``, and
opens exactly once named (or, for a plain ViT, once its settings are stated). Controls: a plain
ViT and a relative-position ViT of other sizes still open exactly with the heads asked for."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import timm
import torch
from zoo_helpers import LOGIT_ATOL, assert_attention, assert_close, images, ours, randomize_
from zoo_helpers import timm_reference as reference

from vitviz.checkpoints import CheckpointError, load_checkpoint
from vitviz.checkpoints.errors import MissingSettingsError

TINY = dict(pretrained=False, img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=4,
            num_classes=3)  # fmt: skip
NO_POSITIONS = {"pos_embed": "none", "class_token": False, "global_pool": "avg"}
AMBIGUOUS = "compute differently from the common ViT"
# id: (timm name, options beyond TINY, what the refusal names, settings that open it exactly)
WRONG_BEFORE = {
    "pe-core": ("vit_pe_core_tiny_patch16_384", {}, "vit_pe_core_", {"arch": "same", "heads": 4}),
    "pe-spatial": (
        "vit_pe_spatial_tiny_patch16_512",
        {},
        "vit_pe_spatial_",
        {"arch": "same", "heads": 4},
    ),
    "clip-quickgelu": (
        "vit_base_patch16_clip_quickgelu_224",
        {},
        "vit_pe_",
        {"arch": "same", "heads": 4},
    ),
    "clip-gelu-stated": (
        "vit_base_patch16_clip_224",
        {},
        "vit_\\*_clip_\\*",
        {"heads": 4, "rope": "none", "norm_eps": 1e-5, "activation": "gelu"},
    ),
    "rope-no-layerscale": ("vit_small_patch16_rope_224", {"init_values": None}, "rope", None),
    "dinov3-no-layerscale": ("vit_small_patch16_dinov3", {"init_values": None}, "dinov3", None),
}


def tiny(name: str, seed: int, **options) -> torch.nn.Module:
    """timm's ``name`` at tiny sizes no timm name has (built by its own function, so options
    set to None, e.g. no LayerScale, are kept), every parameter randomised."""
    torch.manual_seed(seed)
    model = timm.models.model_entrypoint(name)(**{**TINY, **options})
    pool = getattr(model, "attn_pool", None)
    if pool is not None:
        pool.fused_attn = False
    return randomize_(model, seed=seed).eval()


def check_exact(model: torch.nn.Module, loaded, seed: int) -> None:
    x = images(2, 32, 32, seed=seed)
    ref_logits, ref_attn = reference(model, x)
    logits, attn = ours(loaded, x)
    assert_close("logits", ref_logits, logits, LOGIT_ATOL * float(ref_logits.abs().max()))
    assert_attention(ref_attn, attn)


@pytest.mark.parametrize("case", sorted(WRONG_BEFORE))
def test_a_layout_other_architectures_share_is_refused_then_named(tmp_path: Path, case: str):
    name, options, names, opens = WRONG_BEFORE[case]
    model = tiny(name, seed=3, **options)
    path = tmp_path / "bare.pth"
    torch.save(model.state_dict(), path)
    for answer in (None, {"heads": 4}, {"heads": 4, "image_size": 32}):
        with pytest.raises(CheckpointError) as caught:  # formerly opened with wrong logits
            load_checkpoint(path, answer)
        text = str(caught.value)
        assert not isinstance(caught.value, MissingSettingsError), text
        assert AMBIGUOUS in text and "--arch NAME" in text and "\n" not in text, text
        assert re.search(names, text), text
    if opens is None:  # timm's names for it have LayerScale: no name fits these tensors
        with pytest.raises(CheckpointError, match="lack LayerScale"):
            load_checkpoint(path, {"arch": name, "heads": 4})
        return
    settings = {k: (name if v == "same" else v) for k, v in opens.items()}
    loaded = load_checkpoint(path, settings)
    check_exact(model, loaded, seed=3)


@pytest.mark.parametrize(
    ("name", "options", "settings"),
    [
        ("vit_tiny_patch16_224", {"reg_tokens": 2}, {"heads": 4}),
        ("vit_base_patch16_siglip_224", {}, {"heads": 4}),  # an attention pool, patch bias
        ("vit_relpos_small_patch16_224", {}, {"heads": 4, "image_size": 32}),
        ("vit_tiny_patch16_224", NO_POSITIONS, {"heads": 4, "image_size": 32, "rope": "none"}),
    ],
    ids=["registers", "siglip-map", "relpos", "no-positions-stated"],
)
def test_a_plain_layout_of_other_sizes_still_opens_exactly(tmp_path: Path, name, options, settings):
    model = tiny(name, seed=5, **options)
    path = tmp_path / "bare.pth"
    torch.save(model.state_dict(), path)
    activation = model.blocks[0].mlp.act  # asked of every bare file: the weights can't say
    settings = {**settings, "activation": "gelu_tanh" if "tanh" in repr(activation) else "gelu"}
    loaded = load_checkpoint(path, settings)
    assert loaded.family == "timm"
    assert any("assumed timm's common ViT" in n and "no rotary" in n for n in loaded.notes)
    check_exact(model, loaded, seed=5)


@pytest.mark.parametrize(
    ("name", "arch"),
    [
        ("vit_tiny_patch16_224", "vit_small_patch16_224"),  # timm's family: 6 heads
        ("vit_pe_core_tiny_patch16_384", "vit_pe_core_small_patch16_384"),  # timm-eva: 6 heads
    ],
)
def test_an_arch_named_for_tensors_of_other_sizes_asks_for_heads(tmp_path: Path, name, arch):
    """A name given for weights of other sizes says how they compute, not their head count:
    48 wide with 3 heads, named as a 6-head architecture, opened with 6 heads of 8 before."""
    model = tiny(name, seed=7, embed_dim=48, num_heads=3)
    path = tmp_path / "bare.pth"
    torch.save(model.state_dict(), path)
    with pytest.raises(MissingSettingsError, match="don't say: heads") as caught:
        load_checkpoint(path, {"arch": arch})
    assert "\n" not in str(caught.value)
    loaded = load_checkpoint(path, {"arch": arch, "heads": 3})
    assert loaded.config.heads == 3
    check_exact(model, loaded, seed=7)
