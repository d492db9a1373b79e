"""Hostile and broken checkpoints of the families (folders, sidecars, training checkpoints): each
gives one clear line, and nothing in a file ever runs. The basic reader's cases are in
test_checkpoints_reading.py."""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import pytest
import torch
from checkpoint_cases import tv_checkpoint
from safetensors.torch import load_file, save_file
from transformers import ViTConfig, ViTForImageClassification
from zoo_helpers import tiny_torchvision_vit

from vitviz.checkpoints import CheckpointError, load_checkpoint
from vitviz.checkpoints.reading import check_torch_version


class _CreatesAFile:
    """Unpickling this opens ``path`` for writing: the file appears if the pickle ever runs."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def _hf_folder(root: Path, safetensors: bool = True) -> Path:
    torch.manual_seed(0)
    config = ViTConfig(
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        image_size=32,
        patch_size=8,
        num_labels=2,
    )
    folder = root / "hf-vit"
    ViTForImageClassification(config).save_pretrained(folder)
    if not safetensors:
        state = load_file(str(folder / "model.safetensors"))
        (folder / "model.safetensors").unlink()
        torch.save(state, folder / "pytorch_model.bin")
    return folder


def _message(path: Path, **kw: object) -> str:
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path, **kw)
    msg = str(info.value)
    assert "\n" not in msg
    return msg


def test_hostile_pickle_as_a_folders_weights_never_runs(tmp_path: Path) -> None:
    folder = _hf_folder(tmp_path, safetensors=False)
    witness = tmp_path / "pwned.txt"
    state = torch.load(folder / "pytorch_model.bin", weights_only=True)
    torch.save({**state, "hook": _CreatesAFile(witness)}, folder / "pytorch_model.bin")
    msg = _message(folder)
    assert not witness.exists(), "the pickle's code ran"
    assert "pytorch_model.bin" in msg and "code" in msg and "state dict" in msg.lower()


def test_dino_training_checkpoint_with_args_opens_its_teacher(tmp_path: Path) -> None:
    """DINO saves its argparse Namespace beside the weights: admitted as data (the one class
    beyond weights_only's own); its ``arch`` "vit_small" is no timm name, so it names nothing
    and the teacher's tensors decide."""
    model = tiny_torchvision_vit(num_classes=2)
    path = tmp_path / "checkpoint0100.pth"
    torch.save(
        {"teacher": model.state_dict(), "args": argparse.Namespace(arch="vit_small"), "epoch": 100},
        path,
    )
    loaded = load_checkpoint(path, {"heads": 2})
    assert loaded.family == "torchvision"
    assert not any("vit_small" in n for n in loaded.notes), loaded.notes


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        ("truncate", "truncated"),
        ("empty", "empty"),
        ("random", "not a readable"),
        ("lfs", "git lfs"),
    ],
)
def test_damaged_weights_in_a_folder(tmp_path: Path, damage: str, expected: str) -> None:
    folder = _hf_folder(tmp_path)
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    if damage == "truncate":
        weights.write_bytes(data[: len(data) // 2])
    elif damage == "empty":
        weights.write_bytes(b"")
    elif damage == "random":
        weights.write_bytes(random.Random(0).randbytes(4096))  # fixed noise
    else:
        weights.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:ab\nsize 9\n")
    msg = _message(folder)
    assert "model.safetensors" in msg and expected in msg.lower()


def test_folder_without_config_or_weights(tmp_path: Path) -> None:
    (tmp_path / "empty-folder").mkdir()
    assert "without config.json" in _message(tmp_path / "empty-folder")
    folder = tmp_path / "config-only"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "vit"}))
    assert "no weights" in _message(folder)
    (folder / "config.json").write_text("{not json")
    (folder / "model.safetensors").write_bytes(b"")
    assert "not valid JSON" in _message(folder)


def test_sharded_index_pointing_outside_is_refused(tmp_path: Path) -> None:
    folder = _hf_folder(tmp_path)
    (folder / "model.safetensors").rename(tmp_path / "elsewhere.safetensors")
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"classifier.weight": "../elsewhere.safetensors"}})
    )
    assert "outside its folder" in _message(folder)


def test_wrong_shapes_for_a_family_name_the_key(tmp_path: Path) -> None:
    model = tiny_torchvision_vit(num_classes=3)
    sd = dict(model.state_dict())
    sd["heads.head.bias"] = torch.zeros(5)
    path = tmp_path / "tv.pth"
    torch.save(sd, path)
    msg = _message(path, config={"heads": 2})
    assert "head.bias" in msg and "(5,)" in msg and "(3,)" in msg


def test_hf_config_that_contradicts_the_weights(tmp_path: Path) -> None:
    folder = _hf_folder(tmp_path)
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, "num_attention_heads": 5}))
    assert "divisible" in _message(folder)


def test_bad_sidecars_say_what_is_wrong(tmp_path: Path) -> None:
    model = tiny_torchvision_vit(num_classes=2)
    path = tmp_path / "tv.pth"
    torch.save(model.state_dict(), path)
    side = tmp_path / "tv.pth.vitviz.json"
    side.write_text("{heads: 2}")
    assert "tv.pth.vitviz.json is not valid JSON" in _message(path)
    side.write_text(json.dumps({"heads": 2, "colour": "blue"}))
    assert "unknown settings colour" in _message(path)
    side.write_text(json.dumps({"heads": 2, "class_names": ["only one"]}))
    assert "class_names must be a list of 2 names" in _message(path)
    side.write_text(json.dumps({"heads": 2, "preprocessing": {"resize": "stretch"}}))
    assert "preprocessing is invalid" in _message(path)
    assert "must be a dict" in _message(path, config=["heads", 2])


def test_unknown_family_layout_names_keys_and_what_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "resnet.safetensors"
    save_file({"conv1.weight": torch.zeros(4, 3, 7, 7), "fc.weight": torch.zeros(2, 4)}, str(path))
    msg = _message(path)
    assert "conv1.weight" in msg and "torchvision, timm" in msg and "Hugging Face" in msg


def test_torch_without_the_weights_only_fixes_is_refused() -> None:
    with pytest.raises(CheckpointError, match=r"torch 2\.6 or newer.*this is torch 2\.5\.1"):
        check_torch_version("2.5.1+cu121")
    check_torch_version("2.6.0")
    check_torch_version("10.0")


# -- what is in the file or the settings never ends in a raw traceback ---------


def _int8_patch(state: dict) -> dict:
    return {**state, "conv_proj.weight": state["conv_proj.weight"].to(torch.int8)}


def _int8_class_token(state: dict) -> dict:
    return {**state, "class_token": state["class_token"].to(torch.int8)}


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (_int8_patch, ["conv_proj.weight holds int8", "floating-point", "float16"]),
        (_int8_class_token, ["not floating-point numbers", "cls_token int8"]),
    ],
)
def test_integer_weights_are_refused_in_plain_words(tmp_path: Path, edit, words) -> None:
    path = tv_checkpoint(tmp_path, edit=edit)
    msg = _message(path)
    assert "Error(s) in loading state_dict" not in msg and "vit.pth" in msg
    for word in words:
        assert word in msg


def test_a_state_dict_key_that_is_not_a_name_is_refused(tmp_path: Path) -> None:
    path = tv_checkpoint(tmp_path, edit=lambda s: {**s, 0: torch.zeros(1)})
    msg = _message(path)
    assert "vit.pth" in msg and "not a name (0 of type int)" in msg


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"image_size": 32.5}, ["image_size must be a whole number", "32.5"]),
        ({"image_size": [32, "32"]}, ["image_size must be", "[height, width]"]),
        ({"heads": "2"}, ["heads must be a whole number from 1", "'2'"]),
        ({"heads": True}, ["heads must be a whole number"]),
        ({"norm_eps": "small"}, ["norm_eps must be a finite number"]),
        ({"qkv_bias": 1}, ["qkv_bias must be true or false"]),
        ({"preprocessing": {"image_size": 32.5}}, ["preprocessing", "image_size must be"]),
        ({"preprocessing": [1, 2]}, ["preprocessing must be a JSON object"]),
        ({"class_names": "abc"}, ["class_names must be a list of names"]),
        (
            {"preprocessing": {"image_size": 60}},
            ["image size 60×60 is not a multiple of the patch size 8", "56×56"],
        ),
        ({"preprocessing": {"mean": 1e308}}, ["mean", "beyond float32's range"]),
        ({"preprocessing": {"std": 1e-300}}, ["std", "too small for float32"]),
    ],
)
def test_settings_of_the_wrong_kind_say_which_and_what_is_accepted(
    tmp_path: Path, settings: dict, words: list[str]
) -> None:
    msg = _message(tv_checkpoint(tmp_path, settings=settings))
    assert msg.startswith("vit.pth: ")
    for word in words:
        assert word in msg


def test_setting_names_must_be_strings(tmp_path: Path) -> None:
    path = tv_checkpoint(tmp_path)
    assert "setting names must be strings" in _message(path, config={1: 2})


def test_conversion_errors_from_the_file_become_checkpoint_errors(tmp_path: Path) -> None:
    """A 2-D patch embedding makes the converter's unpacking fail: the file's fault, so a
    CheckpointError naming the file, with the original error kept as its cause."""
    path = tv_checkpoint(tmp_path, edit=lambda s: {**s, "conv_proj.weight": torch.zeros(32, 192)})
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    assert str(info.value).startswith("vit.pth: vitviz could not convert these weights")
    assert "\n" not in str(info.value)
    assert isinstance(info.value.__cause__, ValueError)


def test_a_bug_in_a_converter_is_not_hidden(tmp_path: Path, monkeypatch) -> None:
    """Only errors user data can cause are turned into CheckpointErrors; a bug surfaces."""
    import vitviz.checkpoints.families as families
    from vitviz.kinds.vit.families import torchvision as tv

    def broken(source):
        raise AttributeError("a bug in vitviz")

    replaced = tuple(
        families.Family(f.name, f.detect, broken) if f is tv.FAMILY else f
        for f in families.all_families()
    )
    monkeypatch.setattr(families, "all_families", lambda: replaced)
    with pytest.raises(AttributeError, match="a bug in vitviz"):
        load_checkpoint(tv_checkpoint(tmp_path))


def test_nan_weights_load_with_a_note(tmp_path: Path) -> None:
    def nan(state: dict) -> dict:
        w = state["conv_proj.weight"].clone()
        w[0, 0, 0, 0] = float("nan")
        return {**state, "conv_proj.weight": w}

    loaded = load_checkpoint(tv_checkpoint(tmp_path, edit=nan))
    assert any("NaN or infinite values in patch_embed.proj.weight" in n for n in loaded.notes)


@pytest.mark.timeout(20)
def test_an_absurd_depth_is_refused_before_building_the_model(tmp_path: Path) -> None:
    """Building 10⁹ blocks (even without memory) would take hours: the count is checked first."""
    msg = _message(tv_checkpoint(tmp_path, settings={"depth": 1_000_000_000}))
    assert "the settings say depth 1000000000, the weights hold 2 blocks" in msg
