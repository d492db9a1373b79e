"""Model ▸ Download a model… driven as a user would, against the stand-in hub
(``tests/hub_standin.py``): the curated list with sizes and licences, asking before the download,
progress, Cancel and a resume, the model opened when done, a cached one opened at once, a fault
in one line."""

from __future__ import annotations

from pathlib import Path

import pyqtgraph as pg
import pytest
from hub_standin import StandinHub, StandinRepo, tiny_vit_files
from PySide6.QtCore import QSettings

from vitviz.ui.download_dialog import CACHED_MARK
from vitviz.ui.main_window import MainWindow
from vitviz.ui.settings import AppSettings

COMMIT = "abcdef0123456789abcdef0123456789abcdef01"


@pytest.fixture(scope="module")
def vit_files() -> dict[str, bytes]:
    return tiny_vit_files()


@pytest.fixture
def hub(vit_files: dict[str, bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    repos = [
        StandinRepo("facebook/dino-vits16", dict(vit_files), COMMIT),
        StandinRepo("org/tiny-vit", dict(vit_files), COMMIT),
    ]
    for name in ("HF_HUB_CACHE", "HF_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.chdir(tmp_path)
    with StandinHub(repos) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        yield server


@pytest.fixture
def window(qtbot, tmp_path: Path) -> MainWindow:
    pg.setConfigOptions(imageAxisOrder="row-major")
    settings = AppSettings(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    w = MainWindow(settings)
    qtbot.addWidget(w)
    w.show()
    return w


def _model(channel: str, _result: object) -> bool:
    return channel == "model"


def _row_of(dialog, repo_id: str) -> int:
    return next(
        r for r in range(dialog.table.rowCount()) if dialog.table.item(r, 1).text() == repo_id
    )


def _snapshot(tmp_path: Path, repo_id: str) -> Path:
    return (
        tmp_path / "hf" / "hub" / ("models--" + repo_id.replace("/", "--")) / "snapshots" / COMMIT
    )


def test_a_listed_model_is_asked_about_downloaded_and_opened(
    qtbot, window: MainWindow, hub: StandinHub, tmp_path: Path
) -> None:
    window.act_download.trigger()
    dialog = window.hub_dialog
    assert dialog.table.rowCount() >= 12
    row = _row_of(dialog, "facebook/dino-vits16")
    assert dialog.table.item(row, 2).text().endswith("MB")
    assert dialog.table.item(row, 4).text() == "apache-2.0"
    assert dialog.table.item(row, 5).text() == ""
    dialog.table.selectRow(row)
    assert dialog.go_button.text() == "Download…"
    dialog.go_button.click()
    qtbot.waitUntil(lambda: dialog.state == "asking", timeout=20_000)
    assert hub.bytes_served() == 0  # nothing before the user agrees
    assert "3 files" in dialog.status.text() and "KB" in dialog.status.text()
    with qtbot.waitSignal(
        window.client.resultReady, timeout=30_000, check_params_cb=_model
    ) as blocker:
        dialog.go_button.click()
    assert blocker.args[0] == "model"
    assert dialog.state == "done"
    assert window.model is not None and window.model.path == _snapshot(
        tmp_path, "facebook/dino-vits16"
    )
    assert dialog.table.item(row, 5).text() == CACHED_MARK

    dialog.table.clearSelection()
    dialog.table.selectRow(row)
    assert dialog.go_button.text() == "Open"
    asked = len(hub.requests)
    window.model = None
    with qtbot.waitSignal(window.client.resultReady, timeout=30_000, check_params_cb=_model):
        dialog.go_button.click()  # cached: opened at once, no question, no request
    assert window.model is not None and len(hub.requests) == asked


def test_cancel_then_download_again_resumes(
    qtbot, window: MainWindow, hub: StandinHub, tmp_path: Path, vit_files: dict[str, bytes]
) -> None:
    hub.slow[("org/tiny-vit", "model.safetensors")] = 0.02
    dialog = window.download_dialog()
    dialog.id_box.setText("org/tiny-vit")
    dialog.go_button.click()
    qtbot.waitUntil(lambda: dialog.state == "asking", timeout=20_000)
    dialog.go_button.click()
    assert dialog.cancel_button.isVisible() and dialog.bar.isVisible()
    qtbot.waitUntil(lambda: dialog.bar.value() > 100, timeout=20_000)
    dialog.cancel_button.click()
    qtbot.waitUntil(lambda: dialog.state == "cancelled", timeout=20_000)
    assert "kept" in dialog.status.text()
    assert window.model is None or window.model.path != _snapshot(tmp_path, "org/tiny-vit")

    hub.slow.clear()
    dialog.go_button.click()
    qtbot.waitUntil(lambda: dialog.state == "asking", timeout=20_000)
    assert "already here (resumed)" in dialog.status.text()
    with qtbot.waitSignal(window.client.resultReady, timeout=30_000, check_params_cb=_model):
        dialog.go_button.click()
    gets = [r for m, p, r in hub.requests if m == "GET" and p.endswith("/model.safetensors")]
    assert gets[0] == "" and gets[-1].startswith("bytes=") and gets[-1] != "bytes=0-"
    assert window.model.path == _snapshot(tmp_path, "org/tiny-vit")


def test_a_fault_is_one_line_in_the_dialog(qtbot, window: MainWindow, hub: StandinHub) -> None:
    dialog = window.download_dialog()
    dialog.id_box.setText("org/no-such-model")
    dialog.go_button.click()
    qtbot.waitUntil(lambda: dialog.state == "failed", timeout=20_000)
    text = dialog.status.text()
    assert "org/no-such-model" in text and "nor a model on" in text and "\n" not in text
    assert dialog.go_button.isVisible() and dialog.go_button.text() == "Download…"


def test_a_model_id_given_to_the_window_opens_through_the_dialog(
    qtbot, window: MainWindow, hub: StandinHub, tmp_path: Path
) -> None:
    window.open_paths(["org/tiny-vit"])
    dialog = window.hub_dialog
    qtbot.waitUntil(lambda: dialog.state == "asking", timeout=20_000)
    with qtbot.waitSignal(window.client.resultReady, timeout=30_000, check_params_cb=_model):
        dialog.go_button.click()
    assert window.model.path == _snapshot(tmp_path, "org/tiny-vit")


def test_the_command_line_keeps_a_model_id_and_makes_paths_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vitviz.app import given_files

    monkeypatch.chdir(tmp_path)
    (tmp_path / "photo.jpg").write_bytes(b"")
    (tmp_path / "org").mkdir()
    (tmp_path / "org" / "here").mkdir()  # a folder spelt like an id is a folder
    assert given_files(["photo.jpg", "facebook/dinov2-small", "org/here", "a/b@v1.0"]) == [
        str(tmp_path / "photo.jpg"),
        "facebook/dinov2-small",
        str(tmp_path / "org" / "here"),
        "a/b@v1.0",
    ]


def test_download_right_after_cancel_is_taken_once_the_last_run_ends(
    qtbot, window: MainWindow, hub: StandinHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A click on Download… while the cancelled run's thread is still ending is not lost."""
    dialog = window.download_dialog()
    dialog.id_box.setText("org/tiny-vit")
    dialog.state = "cancelled"
    ending = iter([True, True])  # the last run's thread alive for the first two looks
    real = dialog.runner.is_running
    monkeypatch.setattr(dialog.runner, "is_running", lambda: next(ending, None) or real())
    dialog.go_button.click()
    qtbot.waitUntil(lambda: dialog.state == "asking", timeout=20_000)
