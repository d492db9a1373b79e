"""Names people know (vitviz.core.model_names): a cached model's id, a folder's name, the
architecture beside it, in the window's title and status bar, in ``vitviz-cli info`` and
``explain``'s console, in the npz (``model_name``, ``model_arch``) and in the title of every
exported PNG (the map figures, the heads PNG), whatever the model's kind."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import CLASS_NAMES, random_vit
from PIL import Image

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


WORDS = "timm/vit_tiny_test.augreg_in1k · Vision Transformer"


def _title_line_drawn(png: Path, overlay_size: tuple[int, int], text: str) -> bool:
    """Whether ``png`` (a ``titled_figure`` of an overlay of ``overlay_size``) has ``text`` drawn
    as its third title line: the band of that line, pixel for pixel, as a figure of these lines
    draws it."""
    from vitviz.imaging.figure import figure_layout, titled_figure

    blank = Image.new("RGB", overlay_size, (255, 255, 255))
    want = np.asarray(titled_figure(blank, ["", "", text], (0.0, 1.0)))
    two = figure_layout(overlay_size, ["", ""], (0.0, 1.0)).overlay_at
    three = figure_layout(overlay_size, ["", "", text], (0.0, 1.0)).overlay_at
    pad, y0, y1 = two[0], two[1] - two[0], three[1] - three[0]
    with Image.open(png) as f:
        got = np.asarray(f.convert("RGB"))
    w = min(got.shape[1], want.shape[1])
    band = want[y0:y1, :w]
    assert (band != 255).any() and pad > 0  # the text itself is in the band
    return bool(np.array_equal(got[y0:y1, :w], band))


def test_cli_explain_names_the_model(cached: Path, photo_files, tmp_path: Path, capsys) -> None:
    from vitviz.checkpoints import load_checkpoint
    from vitviz.kinds.vit.pictures import heads_grid
    from vitviz.pipeline.analysis import analyze

    out = tmp_path / "out"
    image = photo_files["chelsea"]
    args = ["explain", str(image), "--checkpoint", str(cached), "--out", str(out)]
    assert cli_main(args) == 0
    assert f"vitviz-cli: explaining 1 image with {WORDS}" in capsys.readouterr().err
    with np.load(out / "chelsea.npz") as z:
        assert str(z["model_name"]) == "timm/vit_tiny_test.augreg_in1k"
        assert str(z["model_arch"]) == "Vision Transformer"
    with Image.open(image) as f:
        source = f.size  # the overlay of a ViT's map: the source's own size
    assert _title_line_drawn(out / "chelsea_rollout.png", source, f"model {WORDS}")
    assert _title_line_drawn(out / "chelsea_relevance.png", source, f"model {WORDS}")
    bare = heads_grid(analyze(load_checkpoint(cached), image), titled=False).size
    assert _title_line_drawn(out / "chelsea_heads.png", bare, f"model {WORDS}")


def test_window_exports_name_a_swin_folder(tmp_path: Path, photo_files) -> None:
    """The window's npz and heads PNG of another kind (a Swin in a folder) name the folder:
    one writer for every kind."""
    import torch
    from swin_helpers import tiny_torchvision_swin

    from vitviz.workers import jobs
    from vitviz.workers.messages import MapParams

    folder = tmp_path / "swin-finetune"
    folder.mkdir()
    ckpt = folder / "model.pth"
    torch.save(tiny_torchvision_swin().state_dict(), ckpt)
    sidecar = ckpt.with_name(ckpt.name + ".vitviz.json")
    sidecar.write_text(json.dumps({"preprocessing": {"image_size": [64, 64]}}))
    state = jobs.EngineState()
    jobs.load_model(state, ckpt)
    jobs.analyze_image(state, photo_files["chelsea"], "chelsea")
    params = MapParams(method="rollout")
    npz = jobs.export(state, tmp_path / "w.npz", "npz", params, None, "viridis", 0.6)
    with np.load(npz) as z:
        assert str(z["model_name"]) == "swin-finetune/model.pth"
        assert str(z["model_arch"]) == "Swin Transformer"
    heads = jobs.export(state, tmp_path / "h.png", "heads", params, None, "viridis", 0.6)
    from vitviz.imaging.figure import REFERENCE_SIDE

    with Image.open(heads) as f:
        size = f.size  # the figure, larger than its overlay ...
    assert max(size) <= REFERENCE_SIDE  # ... so the overlay's font is the base one, as for size
    assert _title_line_drawn(heads, size, "model swin-finetune/model.pth · Swin Transformer")
