"""The model and samples that ship with vitviz: complete provenance, real accuracy on shapes it
never saw, attention on the objects, and a first launch that shows it working."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyqtgraph as pg
import pytest
from PIL import Image
from PySide6.QtCore import QSettings

from vitviz.checkpoints import load_checkpoint
from vitviz.core import resources
from vitviz.pipeline.analysis import analyze
from vitviz.training.evaluate import DEFAULT_SEED, evaluate_shapes_model
from vitviz.training.shapes import SHAPE_NAMES

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def shipped():
    path = resources.default_model_path()
    assert path is not None, "resources/models/vitviz-shapes-default.safetensors is missing"
    return path, load_checkpoint(path)


def test_metadata_is_complete(shipped) -> None:
    path, loaded = shipped
    assert path.stat().st_size < 10 * 2**20
    assert loaded.family == "vitviz"
    assert loaded.class_names == list(SHAPE_NAMES)
    assert loaded.config.grid_size[0] * loaded.config.grid_size[1] >= 64
    prov = loaded.provenance
    train = prov["train_config"]
    assert train["dataset"] == "shapes" and isinstance(train["seed"], int)
    assert prov["epochs"] >= 1 and prov["epoch"] >= 1
    data = prov["dataset"]
    assert data["kind"] == "shapes" and data["image_size"] == loaded.config.image_size[0]
    assert prov["made_by"].startswith("python packaging/make_default_model.py")
    assert prov["command"].startswith("vitviz-cli train")
    fresh = prov["fresh_evaluation"]
    used = {data["train_seed"], data["val_seed"]}
    used |= {data["train_seed"] + e for e in range(prov["epochs"])}  # a fresh set every epoch
    assert fresh["seed"] not in used
    assert fresh["accuracy"] >= 0.95
    assert loaded.preprocessing.image_size == tuple(loaded.config.image_size)


def test_accuracy_and_attention_on_fresh_shapes(shipped) -> None:
    """A seed no training used; ≥ 95 % right, rollout mass on the objects ≥ 2× their share."""
    _, loaded = shipped
    result = evaluate_shapes_model(loaded, n=1000, seed=DEFAULT_SEED + 1)
    assert result.accuracy >= 0.95, result
    assert result.rollout_mass_in_mask >= 2 * result.mask_share, result


def test_samples_have_masks_and_are_recognised(shipped) -> None:
    _, loaded = shipped
    samples = resources.sample_images()
    assert [p.stem for p in samples] == sorted(SHAPE_NAMES)
    for path in samples:
        mask = np.asarray(Image.open(path.with_name(f"{path.stem}_mask.png"))) > 0
        assert mask.shape == np.asarray(Image.open(path)).shape[:2] and mask.any()
        assert analyze(loaded, path).top_k(1)[0].name == path.stem


def test_first_launch_shows_the_default_model_on_a_sample(qtbot, tmp_path: Path, shipped) -> None:
    from vitviz.ui.main_window import MainWindow
    from vitviz.ui.settings import AppSettings

    _, loaded = shipped
    pg.setConfigOptions(imageAxisOrder="row-major")
    settings = AppSettings(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    window = MainWindow(settings)
    qtbot.addWidget(window)
    window.show()
    window.start([], defaults=True)
    qtbot.waitUntil(lambda: window.viewer.maps is not None, timeout=30_000)
    first = resources.sample_images()[0]
    expected = analyze(loaded, first)
    assert window.viewer.image.label == first.name
    assert window.viewer.predictions.indices[0] == expected.top_class
    assert window.model is not None and window.model.path == resources.default_model_path()
    assert window.samples_menu.actions()[0].isEnabled()  # the default model, one click away


def test_self_test_passes() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "vitviz", "--self-test"],
        env={**os.environ, "QT_QPA_PLATFORM": "offscreen"},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "self-test passed" in proc.stdout


def test_self_test_says_what_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """In this process (test_self_test_passes runs ``python -m vitviz --self-test`` in its own):
    the same ``main``, its exit status 1 and what it prints."""
    from vitviz.app import main

    broken = tmp_path / "resources"
    (broken / "icons").mkdir(parents=True)  # resources found, but no model in them
    monkeypatch.setenv("VITVIZ_RESOURCES", str(broken))
    assert main(["--self-test"]) == 1
    assert "FAILED: the default model is missing" in capsys.readouterr().out
