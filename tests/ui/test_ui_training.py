"""The Training tab driven as a user would: refuse bad settings, start a real run (child
process), watch the curves and the runs list update, cancel, and open the result in the
viewer."""

from __future__ import annotations

from pathlib import Path

import pyqtgraph as pg
import pytest
from PySide6.QtCore import QSettings

from vitviz.checkpoints import load_checkpoint
from vitviz.training import preset_config
from vitviz.training.runs import read_run
from vitviz.ui.main_window import MainWindow
from vitviz.ui.settings import AppSettings

WAIT_MS = 90_000


@pytest.fixture
def window(qtbot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> MainWindow:
    monkeypatch.setenv("VITVIZ_DATA_DIR", str(tmp_path / "data"))
    pg.setConfigOptions(imageAxisOrder="row-major")
    w = MainWindow(AppSettings(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)))
    qtbot.addWidget(w)
    w.show()
    w.tabs.setCurrentWidget(w.training)
    return w


def small_settings(tab, epochs: int) -> None:
    tab.dataset_kind.setCurrentIndex(tab.dataset_kind.findData("random"))
    for box, value in (
        (tab.image_size, 16),
        (tab.patch_size, 8),
        (tab.dim, 16),
        (tab.depth, 1),
        (tab.heads, 2),
        (tab.train_size, 256),
        (tab.val_size, 64),
        (tab.batch_size, 32),
        (tab.epochs_box, epochs),
    ):
        box.setValue(value)
    tab.device.setCurrentText("cpu")


def run_rows(tab) -> list[str]:
    return [tab.runs.item(i).text() for i in range(tab.runs.count())]


def choose(combo, data: str) -> None:
    """Pick the item whose data is ``data`` as a user does (the combo emits ``activated``)."""
    index = combo.findData(data)
    assert index >= 0, data
    combo.setCurrentIndex(index)
    combo.activated.emit(index)


def test_choosing_a_dataset_chooses_its_preset(window: MainWindow, tmp_path: Path) -> None:
    tab = window.training
    form = "vitviz window: Training tab"
    # the first view: the shapes dataset with the preset made for it, every setting of it
    assert tab.dataset_kind.currentData() == "shapes" and tab.preset.currentData() == "shapes"
    assert tab.config() == preset_config("shapes", command=form)
    choose(tab.dataset_kind, "cifar10")
    assert tab.preset.currentData() == "tutorial"
    tab.dataset_path.setText(str(tmp_path))
    assert tab.config() == preset_config("tutorial", dataset=f"cifar10:{tmp_path}", command=form)
    choose(tab.dataset_kind, "shapes")  # back: the shapes preset again (64 px, no augmentation)
    assert tab.preset.currentData() == "shapes"
    assert tab.config() == preset_config("shapes", command=form)
    choose(tab.dataset_kind, "folder")
    assert tab.preset.currentData() == "tutorial" and tab.dataset_kind.currentData() == "folder"
    # a Swin chosen by its preset stays a Swin when the dataset changes
    tab.apply_preset("swin")
    choose(tab.dataset_kind, "cifar10")
    assert tab.preset.currentData() == "swin" and tab.config().model == "swin"


def test_bad_settings_are_refused_before_anything_starts(
    window: MainWindow, tmp_path: Path
) -> None:
    tab = window.training
    small_settings(tab, 1)
    tab.dim.setValue(30)
    tab.heads.setValue(4)  # 30 is not divisible by 4
    tab.image_size.setValue(20)  # not divisible by the patch size 8
    assert tab.start() is False
    text = tab.problems.text()
    assert "divisible by heads" in text and "divisible by" in text.replace("heads", "")
    assert not tab.runner.is_running()
    assert not (tmp_path / "data" / "runs").exists() or not any(
        (tmp_path / "data" / "runs").iterdir()
    )
    tab.dataset_kind.setCurrentIndex(tab.dataset_kind.findData("folder"))
    tab.dataset_path.setText(str(tmp_path / "no-such-folder"))
    tab.dim.setValue(32)
    tab.image_size.setValue(16)
    assert tab.start() is False
    assert "no-such-folder" in tab.problems.text()


def test_run_updates_curves_cancels_and_opens_in_viewer(qtbot, window: MainWindow) -> None:
    tab = window.training
    small_settings(tab, 500)  # far more than will run: the test cancels it
    assert tab.start(), tab.problems.text()
    assert tab.cancel_button.isEnabled() and not tab.start_button.isEnabled()
    assert run_rows(tab)[0] == f"{tab.run_dir.name} · running · 0 epochs · best –"  # listed
    qtbot.waitUntil(lambda: len(tab.epochs) >= 2, timeout=WAIT_MS)
    row = run_rows(tab)[0]  # the list follows the run, epoch by epoch
    assert row.startswith(f"{tab.run_dir.name} · running · {len(tab.epochs)} epochs · best ")
    assert row.endswith(f"{max(e['val_acc'] for e in tab.epochs):.1%}")
    xs, ys = tab.curve_val.getData()
    assert len(xs) >= 2 and all(y == y for y in ys)  # validation loss drawn, finite
    assert len(tab.curve_step.getData()[0]) > 0  # the per-step curve too
    assert len(tab.probe_labels) >= 1  # an attention snapshot per epoch
    assert tab.progress.value() > 0
    qtbot.waitUntil(lambda: tab.open_last.isEnabled(), timeout=WAIT_MS)
    qtbot.waitUntil(lambda: "ETA" in tab.eta.text(), timeout=WAIT_MS)
    running_progress = tab.progress.text()
    tab.cancel()
    qtbot.waitUntil(lambda: not tab.runner.is_running(), timeout=WAIT_MS)
    assert tab.start_button.isEnabled()
    assert "Cancelled" in tab.status.text()
    assert tab.progress.text() != running_progress and "Cancelled" in tab.progress.text()
    assert tab.eta.text() == ""  # no ETA left standing after the run
    last = tab._checkpoint("last")
    assert last is not None
    load_checkpoint(last)  # the checkpoint left by the cancelled run is whole
    with qtbot.waitSignal(
        window.client.resultReady,
        timeout=WAIT_MS,
        check_params_cb=lambda channel, _r: channel == "model",
    ):
        tab.open_last.click()
    assert window.tabs.currentWidget() is window.viewer
    assert window.model is not None and window.model.path == last
    assert run_rows(tab)[0].startswith(f"{tab.run_dir.name} · cancelled · ")
    tab._on_run_selected(tab.runs.item(0))  # a past run shows how far it got, not 0 %
    done = read_run(tab.run_dir).epochs_done
    assert tab.progress.value() == round(1000 * done / 500) and done >= 2
    assert tab.progress.text().startswith("Cancelled at")


def test_form_and_train_config_round_trip_through_the_field_table(window: MainWindow) -> None:
    """Every field of the table goes both ways: a config with no default value left comes
    back from the form unchanged (set_config, then config)."""
    from dataclasses import fields, replace

    from vitviz.training import TrainConfig
    from vitviz.ui.training_tab import FIELDS

    tab = window.training
    cfg = TrainConfig(
        dataset="folder:/data/pets",
        image_size=48,
        patch_size=4,
        dim=40,
        depth=3,
        heads=5,
        mlp_ratio=2.5,
        pos_embed="sincos2d",
        drop_path_rate=0.25,
        train_size=1234,
        val_size=321,
        seed=7,
        epochs=3,
        batch_size=24,
        lr=0.0025,
        weight_decay=0.125,
        warmup_epochs=2.5,
        label_smoothing=0.2,
        grad_clip=3.5,
        device="cpu",
        compile="on",
        model="swin",
        window_size=2,
        swin_dims=(8, 16),
        swin_depths=(1, 3),
        swin_heads=(2, 4),
    )
    defaults = TrainConfig()
    assert all(getattr(cfg, f.field) != getattr(defaults, f.field) for f in FIELDS)
    tab.set_config(cfg)
    back = tab.config()
    for f in fields(TrainConfig):
        if f.name != "command":
            assert getattr(back, f.name) == getattr(cfg, f.name), f.name
    tab.set_config(replace(cfg, train_size=None, device="cuda:1"))
    assert tab.train_size.text() == "default" and tab.config().train_size is None
    assert tab.config().device == "auto"  # a device the list lacks
