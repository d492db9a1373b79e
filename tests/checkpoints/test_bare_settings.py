"""Bare timm state dicts fine-tuned with a setting the weights can't show (DESIGN §4): each is
built with timm and the setting, every parameter perturbed, saved bare. Opened, it is asked for
in one line naming the flags and keys that settle it, with the conventions that stand unless
given; the answer, given, is exact. Before, each opened with another network's numbers."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import timm
import torch
from zoo_helpers import LOGIT_ATOL, assert_attention, assert_close, images, ours, randomize_
from zoo_helpers import timm_reference as reference

from vitviz.checkpoints import CheckpointError, load_checkpoint
from vitviz.checkpoints.errors import MissingSettingsError

# width 192: timm's names give it 3 heads of 64, the one width convention vitviz uses
SMALL = dict(embed_dim=192, depth=2, patch_size=8, img_size=32, num_heads=3, num_classes=5)
# id: (timm options beyond SMALL, the settings asked or assumed the message must name, the
# answer that opens it exactly)
CASES = {
    "grid-4x6": (  # 4×6 patches + CLS = 25 entries: read as a square 5×5 without CLS before
        dict(img_size=(32, 48)),
        ["activation", "image_size", "no_embed_class"],
        {"activation": "gelu", "image_size": [32, 48]},
    ),
    "grid-4x6-no-embed-class": (  # 24 entries: the size alone says the table skips CLS
        dict(img_size=(32, 48), no_embed_class=True),
        ["image_size"],
        {"activation": "gelu", "image_size": [32, 48]},
    ),
    "fc-norm-with-cls-pooling": (
        dict(fc_norm=True, global_pool="token"),
        ["activation", "mean pooling", '"global_pool"'],
        {"activation": "gelu", "global_pool": "token"},
    ),
    "mean-pooling-without-fc-norm": (
        dict(fc_norm=False, global_pool="avg"),
        ["activation", "CLS pooling", '"global_pool"'],
        {"activation": "gelu", "global_pool": "avg"},
    ),
    "six-heads": (
        dict(num_heads=6),
        ["activation", "heads 3", "--heads N"],
        {"activation": "gelu", "heads": 6},
    ),
    "gelu-tanh": (dict(act_layer="gelu_tanh"), ["activation"], {"activation": "gelu_tanh"}),
    "quick-gelu": (dict(act_layer="quick_gelu"), ["activation"], {"activation": "quick_gelu"}),
}


def bare(tmp_path: Path, seed: int, name: str = "vit_tiny_patch16_224", **options) -> tuple:
    """(timm's model with ``options``, every parameter perturbed; its bare state dict's path)."""
    torch.manual_seed(seed)
    model = randomize_(timm.create_model(name, **{**SMALL, **options}), seed=seed).eval()
    path = tmp_path / "fine_tuned.pth"
    torch.save(model.state_dict(), path)
    return model, path


def assert_exact(model: torch.nn.Module, loaded, seed: int = 0) -> None:
    h, w = model.patch_embed.img_size
    x = images(2, h, w, seed=seed)
    ref_logits, ref_attn = reference(model, x)
    logits, attn = ours(loaded, x)
    assert_close("logits", ref_logits, logits, LOGIT_ATOL * float(ref_logits.abs().max()))
    assert_attention(ref_attn, attn)


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_setting_the_weights_cant_show_is_asked_for_and_the_answer_is_exact(
    tmp_path: Path, case: str
) -> None:
    options, named, answer = CASES[case]
    model, path = bare(tmp_path, seed=3, **options)
    with pytest.raises(MissingSettingsError) as caught:  # before: opened wrong, nothing asked
        load_checkpoint(path)
    text = str(caught.value)
    assert "\n" not in text and "the weights don't say" in text, text
    for word in named:
        assert word in text, (word, text)
    guesses = {**caught.value.fields, **caught.value.assumed}  # the dialog's prefilled guesses
    assert set(caught.value.fields) <= set(answer) | {"heads"}, caught.value.fields
    assert guesses, text
    loaded = load_checkpoint(path, answer)
    check = next(n for n in loaded.notes if n.startswith("checked against timm"))
    h, w = model.patch_embed.img_size  # timm's own model, built with the settings resolved
    built = f"VisionTransformer with width 192, depth 2, {model.blocks[0].attn.num_heads} heads"
    assert built in check and f"{h}×{w}" in check, check
    assert_exact(model, loaded)


def test_the_conventions_used_are_notes_that_say_so(tmp_path: Path) -> None:
    """Given only the activation, a 192-wide file opens on timm's conventions, each a note
    beginning 'assumed' (the CLI prints them first) with the flag that changes it."""
    model, path = bare(tmp_path, seed=4, fc_norm=True, global_pool="avg")
    loaded = load_checkpoint(path, {"activation": "gelu"})
    assumed = [n for n in loaded.notes if n.startswith("assumed ")]
    assert any(n.startswith("assumed heads 3:") and "--heads N" in n for n in assumed), assumed
    assert any(n.startswith("assumed mean pooling: fc_norm is present") for n in assumed), assumed
    assert loaded.config.global_pool == "avg" and loaded.config.heads == 3
    assert_exact(model, loaded)


def test_a_logit_per_token_is_refused_by_name(tmp_path: Path) -> None:
    _model, path = bare(tmp_path, seed=5, global_pool="")
    with pytest.raises(CheckpointError, match=r"global_pool '' gives a logit per token") as caught:
        load_checkpoint(path, {"activation": "gelu", "global_pool": ""})
    assert "\n" not in str(caught.value)


def test_an_image_size_the_table_cannot_have_names_both_layouts(tmp_path: Path) -> None:
    _model, path = bare(tmp_path, seed=6, img_size=(32, 48))
    with pytest.raises(CheckpointError, match=r"no_embed_class false\) nor 16") as caught:
        load_checkpoint(path, {"activation": "gelu", "image_size": 32})
    assert "25 entries" in str(caught.value)


def test_registers_and_a_non_square_grid_are_asked_the_size(tmp_path: Path) -> None:
    """A DINOv2 with registers (its table covers the patches only) at a 2×3 grid: 6 entries,
    which less the 5 prefix tokens is a 1×1 square; read so before, opened wrong."""
    name = "vit_small_patch14_reg4_dinov2"
    torch.manual_seed(11)
    model = timm.create_model(name, img_size=(28, 42), num_classes=3)
    model = randomize_(model, seed=11, scale=0.1).eval()
    path = tmp_path / "dinov2.pth"
    torch.save(model.state_dict(), path)
    with pytest.raises(MissingSettingsError, match=r"don't say: image_size \(") as caught:
        load_checkpoint(path, {"activation": "gelu"})
    assert "no_embed_class" in str(caught.value)
    loaded = load_checkpoint(path, {"activation": "gelu", "image_size": [28, 42]})
    assert loaded.config.no_embed_class
    assert_exact(model, loaded)


# --arch NAME for weights of that name's own sizes (depth 12), fine-tuned with another setting
FULL = dict(img_size=32, num_classes=4)
ARCH = "vit_tiny_patch16_224"
ARCH_CASES = {
    # id: (timm options, the settings that say it, what the check's line says it built)
    "six-heads": (dict(num_heads=6), {"heads": 6}, "6 heads"),
    "mean-pooling": (dict(global_pool="avg", fc_norm=False), {"global_pool": "avg"}, "mean"),
    "fc-norm-cls": (dict(global_pool="token", fc_norm=True), {"global_pool": "token"}, "fc_norm"),
    "gelu-tanh": (dict(act_layer="gelu_tanh"), {"activation": "gelu_tanh"}, "GELU (tanh)"),
    "quick-gelu": (dict(act_layer="quick_gelu"), {"activation": "quick_gelu"}, "QuickGELU"),
}


@pytest.mark.parametrize("case", sorted(ARCH_CASES))
def test_arch_states_the_names_settings_and_the_check_builds_the_ones_given(
    tmp_path: Path, case: str
) -> None:
    """--arch NAME alone: the name's settings are listed as assumed (before: nothing printed,
    or 'logits 0.17' blamed on vitviz for --heads 6). With the setting given: exact, and the
    library check's line says what it built."""
    options, settings, built = ARCH_CASES[case]
    torch.manual_seed(8)
    model = randomize_(timm.create_model(ARCH, **FULL, **options), seed=8, scale=0.1).eval()
    path = tmp_path / "fine_tuned.pth"
    torch.save(model.state_dict(), path)
    loaded = load_checkpoint(path, {"arch": ARCH})
    first = next(n for n in loaded.notes if n.startswith("assumed from timm's " + ARCH))
    assert "3 heads" in first and "GELU" in first and "--heads N" in first, first
    loaded = load_checkpoint(path, {"arch": ARCH, **settings})
    check = next(n for n in loaded.notes if n.startswith("checked against timm"))
    assert re.search(rf"vitviz's reading of timm's {ARCH} with [^:]*{re.escape(built)}", check)
    assert_exact(model, loaded)


ROPE = "vit_small_patch16_rope_224"


@pytest.mark.parametrize("size", [64, (64, 96)], ids=["64px", "64x96"])
def test_a_rotary_vits_trained_size_is_asked_for(tmp_path: Path, size) -> None:
    """No position table says a rotary ViT's size: asked (before: run at the name's 224)."""
    torch.manual_seed(9)
    model = timm.create_model(ROPE, depth=2, img_size=size, num_classes=4)
    model = randomize_(model, seed=9, scale=0.1).eval()
    path = tmp_path / "rope.pth"
    torch.save(model.state_dict(), path)
    with pytest.raises(MissingSettingsError, match=r"the weights don't say: heads, image_size"):
        load_checkpoint(path, {"arch": ROPE})
    given = [size, size] if isinstance(size, int) else list(size)
    loaded = load_checkpoint(path, {"arch": ROPE, "heads": 6, "image_size": given})
    assert tuple(loaded.config.image_size) == tuple(given)
    assert_exact(model, loaded)


def test_an_eva02_fine_tuned_with_cls_pooling_opens_after_arch_and_heads(tmp_path: Path) -> None:
    """Before: 'missing fc_norm…; unexpected norm…'. Now the tensors' final norm gives CLS
    pooling, noted as assumed; timm's model with it agrees."""
    torch.manual_seed(10)
    arch = "eva02_tiny_patch14_224"
    model = timm.create_model(arch, depth=2, img_size=56, num_classes=4, global_pool="token",
                              use_fc_norm=False)  # fmt: skip
    model = randomize_(model, seed=10, scale=0.1).eval()
    path = tmp_path / "eva.pth"
    torch.save(model.state_dict(), path)
    loaded = load_checkpoint(path, {"arch": arch, "heads": 3})
    assert loaded.config.global_pool == "token" and not loaded.config.fc_norm
    assert any(n.startswith("assumed CLS pooling") for n in loaded.notes), loaded.notes
    check = next(n for n in loaded.notes if n.startswith("checked against timm"))
    assert "with CLS pooling, no fc_norm" in check, check
    assert_exact(model, loaded)


def test_the_cli_refuses_in_one_line_then_lists_the_assumptions_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """vitviz-cli explain: refused naming what settles it; given it, the first lines are the
    assumed settings with their values, before any output."""
    from PIL import Image

    from vitviz.cli import main

    _model, path = bare(tmp_path, seed=12, fc_norm=True, global_pool="avg")
    image = tmp_path / "x.png"
    Image.new("RGB", (40, 40), (200, 120, 40)).save(image)
    argv = ["explain", str(image), "--checkpoint", str(path), "--device", "cpu",
            "--out", str(tmp_path / "out"), "--method", "attention"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and '"activation"' in err and "--heads N" in err, err
    (tmp_path / "act.json").write_text(json.dumps({"activation": "gelu"}))
    assert main([*argv, "--config", str(tmp_path / "act.json")]) == 0
    lines = capsys.readouterr().err.splitlines()
    assumed = [line for line in lines if line.startswith("vitviz-cli: assumed ")]
    assert lines[: len(assumed)] == assumed, lines  # first
    assert any("assumed heads 3" in line for line in assumed), lines
    assert any("assumed mean pooling" in line for line in assumed), lines
