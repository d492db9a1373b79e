"""Names people know (vitviz.core.model_names): a cached model's id, a folder's name, the
architecture beside it, in the window's title and status bar and in ``vitviz-cli info``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import CLASS_NAMES, random_vit

from vitviz.checkpoints import save_checkpoint
from vitviz.cli import main as cli_main
from vitviz.core.model_names import architecture_words, folder_architecture, known_name

SNAPSHOT = "models--timm--vit_tiny_test.augreg_in1k/snapshots/0123456789abcdef"


def test_names(tmp_path: Path) -> None:
    snap = tmp_path / "hub" / SNAPSHOT
    snap.mkdir(parents=True)
    assert known_name(snap / "model.safetensors") == "timm/vit_tiny_test.augreg_in1k"
    assert known_name(snap) == "timm/vit_tiny_test.augreg_in1k"
    folder = tmp_path / "my-finetune"
    folder.mkdir()
    assert known_name(folder) == "my-finetune"
    assert known_name(folder / "pytorch_model.bin") == "my-finetune/pytorch_model.bin"
    assert known_name(folder / "deit_small.pth") == "deit_small.pth"
    assert known_name(None, "model-code") == "model-code"


def test_architecture_from_the_folders_config(tmp_path: Path) -> None:
    timm_folder, hf_folder, bare = tmp_path / "t", tmp_path / "h", tmp_path / "b"
    for f in (timm_folder, hf_folder, bare):
        f.mkdir()
    (timm_folder / "config.json").write_text(json.dumps({"architecture": "vit_small_patch16"}))
    (hf_folder / "config.json").write_text(json.dumps({"architectures": ["CLIPModel"]}))
    (bare / "config.json").write_text("[1, 2]")
    assert folder_architecture(timm_folder / "model.safetensors") == "vit_small_patch16"
    assert folder_architecture(hf_folder) == "CLIPModel"
    assert folder_architecture(bare) is None
    assert architecture_words(bare / "x.pth", "Swin Transformer") == "Swin Transformer"


@pytest.fixture
def cached(tmp_path: Path) -> Path:
    snap = tmp_path / "hub" / SNAPSHOT
    snap.mkdir(parents=True)
    return save_checkpoint(random_vit(), snap / "model.safetensors", class_names=CLASS_NAMES)


def test_cli_info_names_the_model(cached: Path, capsys) -> None:
    assert cli_main(["info", str(cached)]) == 0
    out = capsys.readouterr().out
    assert "model:          timm/vit_tiny_test.augreg_in1k · Vision Transformer" in out


def test_window_title_and_status_bar(qtbot, tmp_path: Path, cached: Path, photo_files) -> None:
    from test_ui_window import drop, new_window, wait_shown

    window = new_window(qtbot, tmp_path / "settings.ini")
    drop(window, [photo_files["chelsea"], cached])
    wait_shown(qtbot, window, "chelsea.png")
    words = "timm/vit_tiny_test.augreg_in1k · Vision Transformer"
    assert window.windowTitle() == f"vitviz — {words}"
    assert window.model_label.text().startswith(words + " (vitviz, ")
