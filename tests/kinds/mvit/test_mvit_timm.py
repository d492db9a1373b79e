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
from zoo_helpers import images

from vitviz.checkpoints import CheckpointError, load_checkpoint

timm = pytest.importorskip("timm")

LOGITS_RTOL, ATTENTION_ATOL = 1e-4, 1e-5
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
    scale = float(want.abs().max())
    assert float((out.logits - want).abs().max()) / scale < LOGITS_RTOL
    assert len(out.attentions) == len(want_attn) == blocks
    for a, b in zip(out.attentions, want_attn, strict=True):
        assert a.shape == b.shape
        assert float((a - b).abs().max()) < ATTENTION_ATOL
    assert any("checked against timm" in n for n in loaded.notes), loaded.notes


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
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(save_bare(refs[(False, True)], tmp_path / "mvit.pth"))
    text = str(info.value)
    assert "\n" not in text and "differs from timm" in text, text


def _with_residual_pooling(cfg_args):
    def args(config):
        return {**cfg_args(config), "residual_pooling": True}

    return args


def test_pool_first_is_refused_by_name(tmp_path: Path) -> None:
    from timm.models.mvitv2 import MultiScaleVit, MultiScaleVitCfg

    cfg = MultiScaleVitCfg(depths=(1, 1), embed_dim=8, num_heads=1, pool_first=True)
    model = MultiScaleVit(cfg, img_size=32, num_classes=3)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(save_bare(model, tmp_path / "mvit.pth"))
    text = str(info.value)
    assert "\n" not in text and "pool_first" in text, text


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
    state = dict(refs[(False, True)].state_dict())
    if change[0] == "drop":
        del state[change[1]]
    else:
        state[change[1]] = change[2]
    torch.save(state, tmp_path / "mvit.pth")
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(tmp_path / "mvit.pth")
    text = str(info.value)
    assert "\n" not in text and words in text, text


def test_vitvizs_own_file_of_an_mvit_opens_as_it_was(refs, tmp_path: Path) -> None:
    """``vitviz-cli convert`` writes the config (its per-stage strides too) beside the weights;
    the file opens to the same network; ``vitviz-cli info`` describes both."""
    from vitviz.cli import main

    ref = refs[(True, False)]
    bare = save_bare(ref, tmp_path / "mvit.pth")
    assert main(["info", str(bare)]) == 0
    assert main(["convert", str(bare), str(tmp_path / "own.safetensors")]) == 0
    own, first = load_checkpoint(tmp_path / "own.safetensors"), load_checkpoint(bare)
    assert own.family == "vitviz" and own.model.config == first.model.config
    x = images(1, SIZE, SIZE, seed=6)
    with torch.no_grad():
        got, want = own.model(x), ref(x)
    assert float((got - want).abs().max()) / float(want.abs().max()) < LOGITS_RTOL


def test_the_library_check_builds_the_files_sizes(tmp_path: Path) -> None:
    """--arch names timm's mvitv2_tiny (widths 96-768, depths 1-2-5-2) for an MViTv2 of widths
    8-64, depths 1-2-1-1: timm's MultiScaleVit is built with the file's sizes, so the check
    compares (its note says "checked against timm"), never refuses it."""
    path = tmp_path / "mvit.pth"
    torch.save(tiny_timm_mvit().state_dict(), path)
    loaded = load_checkpoint(path, {"arch": "mvitv2_tiny"})
    checked = [n for n in loaded.notes if "checked against timm" in n]
    assert len(checked) == 1 and checked[0].startswith("checked against timm"), loaded.notes
    assert "mvitv2_tiny with widths 8, 16, 32, 64, depths 1, 2, 1, 1" in checked[0], checked[0]


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
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path, {"arch": "mvitv2_tiny"})
    text = str(info.value)
    assert "\n" not in text and f"timm's mvitv2_tiny has {words}" in text, text
    assert any("checked against timm" in n for n in load_checkpoint(path).notes)
