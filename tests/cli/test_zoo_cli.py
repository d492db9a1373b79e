"""vitviz-cli info shows the family, notes and what was dropped; convert writes native files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import Dinov2Config, Dinov2Model
from zoo_helpers import images, randomize_, tiny_torchvision_vit

from vitviz.checkpoints import load_checkpoint
from vitviz.cli import main


@pytest.fixture(scope="module")
def hf_dinov2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    config = Dinov2Config(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, image_size=28, patch_size=7
    )
    folder = tmp_path_factory.mktemp("zoo") / "dinov2-small"
    randomize_(Dinov2Model(config)).save_pretrained(folder)
    return folder


def test_info_shows_family_notes_and_dropped(
    hf_dinov2: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["info", str(hf_dinov2)]) == 0
    out = capsys.readouterr().out
    assert "family:         huggingface-dinov2" in out
    assert "dropped:        mask_token" in out
    assert "note:" in out
    assert main(["info", str(hf_dinov2), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["family"] == "huggingface-dinov2"
    assert any(n.startswith("mask_token") for n in d["dropped"])


def test_convert_writes_native_with_provenance(
    hf_dinov2: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "dinov2.safetensors"
    assert main(["convert", str(hf_dinov2), str(target)]) == 0
    assert "dinov2-small (huggingface-dinov2" in capsys.readouterr().err
    native, original = load_checkpoint(target), load_checkpoint(hf_dinov2)
    assert native.family == "vitviz"
    assert native.provenance["family"] == "huggingface-dinov2"
    assert native.provenance["converted_from"] == str(hf_dinov2.resolve())
    assert native.preprocessing == original.preprocessing
    x = images(1, 28, 28)
    with torch.no_grad():
        assert torch.equal(native.model(x), original.model(x))


def test_config_file_supplies_what_the_weights_lack(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tiny_torchvision_vit(num_classes=3)
    path = tmp_path / "tv.pth"
    torch.save(model.state_dict(), path)
    assert main(["info", str(path)]) == 2
    assert "the weights don't say: heads" in capsys.readouterr().err
    cfg = tmp_path / "settings.json"
    cfg.write_text(json.dumps({"heads": 2, "class_names": ["a", "b", "c"]}))
    assert main(["info", str(path), "--config", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert "family:         torchvision" in out and "heads 2" in out and "(a, b, c)" in out
    assert main(["convert", str(path), str(tmp_path / "tv.pth.out"), "--config", str(cfg)]) == 2
    assert ".safetensors" in capsys.readouterr().err
