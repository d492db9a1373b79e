"""Hostile and broken checkpoints of the families (folders, sidecars, training checkpoints): each
gives one clear line, and nothing in a file ever runs. The basic reader's cases are in
test_checkpoints_reading.py."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pytest
import torch
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


def test_dino_training_checkpoint_with_args_is_refused(tmp_path: Path) -> None:
    """DINO saves its argparse Namespace beside the weights: that needs code to unpickle."""
    model = tiny_torchvision_vit(num_classes=2)
    path = tmp_path / "checkpoint0100.pth"
    torch.save(
        {"teacher": model.state_dict(), "args": argparse.Namespace(arch="vit_small"), "epoch": 100},
        path,
    )
    msg = _message(path)
    assert "checkpoint0100.pth" in msg and "Namespace" in msg and "state dict" in msg.lower()


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
        weights.write_bytes(os.urandom(4096))
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
