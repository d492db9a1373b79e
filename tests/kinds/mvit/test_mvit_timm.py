"""timm's MViTv2 opened by vitviz, as a timm folder and as a bare state dict, with and without
a CLS token, widths changed by the attention (expand_attn) or by the MLP (mvitv2_large's way),
with perturbed weights: logits within 1e-4 (relative) and every block's attention within 1e-5
of timm's own model; the library check ran; a bare file whose tensors are a timm name opens
as it (noted); timm's MViTv2 settings no timm name uses, and broken files, are refused in one
line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from mvit_helpers import (
    NAMED_SIZE,
    SIZE,
    named_timm_mvit,
    save_bare,
    save_folder,
    timm_logits_and_attention,
    tiny_timm_mvit,
)
from timm_zoo_checks import (
    assert_attentions_close,
    assert_checked_against_timm,
    assert_library_check_names,
    assert_logits_close,
    assert_own_file_opens_as_it_was,
    broken,
    refused_in_one_line,
    save_state,
)
from zoo_helpers import images

from vitviz.checkpoints import load_checkpoint

timm = pytest.importorskip("timm")

VARIANTS = [(False, True), (True, True), (False, False), (True, False)]
IDS = ["avg", "cls", "avg-mlp-widens", "cls-mlp-widens"]


@pytest.fixture(scope="module")
def refs() -> dict[tuple[bool, bool], torch.nn.Module]:
    return {
        v: tiny_timm_mvit(cls=v[0], expand_attn=v[1], seed=3 + i) for i, v in enumerate(VARIANTS)
    }


def _compare(loaded, ref: torch.nn.Module, size: int, blocks: int) -> None:
    x = images(2, size, size, seed=4)
    want, want_attn = timm_logits_and_attention(ref, x)
    with torch.no_grad():
        out = loaded.model.forward_explained(x)
    assert_logits_close(out.logits, want)
    assert_attentions_close(out.attentions, want_attn, blocks)
    assert_checked_against_timm(loaded)


@pytest.mark.parametrize("variant", VARIANTS, ids=IDS)
def test_a_bare_state_dict_opens_exactly(refs, tmp_path: Path, variant) -> None:
    loaded = load_checkpoint(save_bare(refs[variant], tmp_path / "mvit.pth"))
    cfg = loaded.model.config
    assert loaded.kind.name == "mvit"
    assert (cfg.use_cls_token, cfg.expand_attn) == variant
    assert cfg.heads == (1, 2, 4, 8) and cfg.image_size == (SIZE, SIZE)
    assert cfg.global_pool == ("token" if variant[0] else "avg")
    assert any("every timm mvitv2_* has" in n for n in loaded.notes), loaded.notes
    _compare(loaded, refs[variant], SIZE, 5)
    # queries on the grids 16, 8, 8, 4, 2; keys pooled from each block's input grid by the
    # stage's stride 4, 2, 1, 1: 16 -> 4, 16 -> 8, 8 -> 4, 8 -> 8, 4 -> 4
    probs = loaded.model.forward_explained(images(1, SIZE, SIZE, seed=1)).attentions
    P = int(variant[0])
    assert [tuple(a.shape[-2:]) for a in probs] == [
        (P + 256, P + 16), (P + 64, P + 64), (P + 64, P + 16), (P + 16, P + 64), (P + 4, P + 16)
    ]  # fmt: skip


@pytest.mark.parametrize("name", ["mvitv2_tiny", "mvitv2_small_cls"])
def test_a_timm_folder_opens_exactly(tmp_path: Path, name: str) -> None:
    ref = named_timm_mvit(name)
    loaded = load_checkpoint(save_folder(ref, tmp_path / "mvit"))
    assert loaded.model.config.use_cls_token == name.endswith("_cls")
    assert tuple(loaded.preprocessing.image_size) == (NAMED_SIZE, NAMED_SIZE)
    assert any(f"timm's {name}" in n for n in loaded.notes), loaded.notes
    _compare(loaded, ref, NAMED_SIZE, sum(loaded.model.config.depths))


def test_a_bare_timm_name_is_recognised_by_its_tensors(tmp_path: Path) -> None:
    ref = named_timm_mvit("mvitv2_tiny", seed=5)
    loaded = load_checkpoint(save_bare(ref, tmp_path / "mvit.safetensors.pth"))
    assert any("recognised as timm's mvitv2_tiny" in n for n in loaded.notes), loaded.notes
    assert any("checked against timm" in n and "mvitv2_tiny" in n for n in loaded.notes)
    _compare(loaded, ref, NAMED_SIZE, 10)


def test_a_reading_timm_computes_otherwise_is_refused(refs, tmp_path: Path, monkeypatch) -> None:
    """The library check refuses what vitviz would show wrong: residual pooling switched off
    in vitviz's reading only."""
    from vitviz.kinds.mvit import families

    monkeypatch.setitem(families.SHARED, "residual_pooling", False)
    monkeypatch.setattr(families, "timm_cfg_args", _with_residual_pooling(families.timm_cfg_args))
    refused_in_one_line(save_bare(refs[(False, True)], tmp_path / "mvit.pth"), "differs from timm")


def _with_residual_pooling(cfg_args):
    def args(config):
        return {**cfg_args(config), "residual_pooling": True}

    return args


def test_pool_first_is_refused_by_name(tmp_path: Path) -> None:
    from timm.models.mvitv2 import MultiScaleVit, MultiScaleVitCfg

    cfg = MultiScaleVitCfg(depths=(1, 1), embed_dim=8, num_heads=1, pool_first=True)
    model = MultiScaleVit(cfg, img_size=32, num_classes=3)
    refused_in_one_line(save_bare(model, tmp_path / "mvit.pth"), "pool_first")


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (("drop", "stages.1.blocks.0.mlp.fc1.weight"), "mlp.fc1.weight"),
        (("drop", "stages.0.blocks.0.norm1.weight"), "numbered"),
        (("drop", "stages.2.blocks.0.norm2.weight"), "lacks stages.2.blocks.0.norm2.weight"),
        (("set", "stages.1.blocks.1.attn.rel_pos_h", torch.zeros(9, 8)), "rel_pos_h"),
        (("set", "patch_embed.proj.weight", torch.zeros(8, 3, 7)), "stem"),
    ],
)
def test_a_broken_mvit_is_refused_in_one_line(refs, tmp_path: Path, change, words) -> None:
    state = broken(refs[(False, True)].state_dict(), change)
    refused_in_one_line(save_state(state, tmp_path / "mvit.pth"), words)


def test_vitvizs_own_file_of_an_mvit_opens_as_it_was(refs, tmp_path: Path) -> None:
    """``vitviz-cli convert`` writes the config (its per-stage strides too) beside the weights;
    the file opens to the same network; ``vitviz-cli info`` describes both."""
    ref = refs[(True, False)]
    assert_own_file_opens_as_it_was(ref, save_bare(ref, tmp_path / "mvit.pth"), tmp_path, SIZE)


def test_the_library_check_builds_the_files_sizes(tmp_path: Path) -> None:
    """--arch names timm's mvitv2_tiny (widths 96-768, depths 1-2-5-2) for an MViTv2 of widths
    8-64, depths 1-2-1-1: timm's MultiScaleVit is built with the file's sizes, so the check
    compares (its note says "checked against timm"), never refuses it."""
    path = tmp_path / "mvit.pth"
    torch.save(tiny_timm_mvit().state_dict(), path)
    loaded = load_checkpoint(path, {"arch": "mvitv2_tiny"})
    assert_library_check_names(loaded, "mvitv2_tiny with widths 8, 16, 32, 64, depths 1, 2, 1, 1")


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (
            {"stride_q": ((1, 1), (2, 2), (2, 2), (1, 1))},
            "stride_q ((1, 1), (2, 2), (2, 2), (1, 1))",
        ),
        ({"residual_pooling": False}, "residual_pooling False"),
        ({"norm_eps": 1e-5}, "norm_eps 1e-05"),
    ],
    ids=["strides", "residual-pooling", "eps"],
)
def test_a_named_files_unseen_settings_are_the_names(
    tmp_path: Path, monkeypatch, change: dict, words: str
) -> None:
    """The settings the weights don't say are compared with timm's config of the name the file
    gives (its ``model_cfgs`` entry, here changed): a name whose strides, residual pooling or
    eps vitviz's reading does not have is refused in one line naming them; without the name
    the file opens (read with every timm name's settings)."""
    import dataclasses

    from timm.models import mvitv2

    path = tmp_path / "mvit.pth"
    torch.save(tiny_timm_mvit().state_dict(), path)
    named = dataclasses.replace(mvitv2.model_cfgs["mvitv2_tiny"], stride_kv=None, **change)
    monkeypatch.setitem(mvitv2.model_cfgs, "mvitv2_tiny", named)
    refused_in_one_line(path, f"timm's mvitv2_tiny has {words}", settings={"arch": "mvitv2_tiny"})
    assert any("checked against timm" in n for n in load_checkpoint(path).notes)
