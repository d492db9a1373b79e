"""The window and the refusals: a preprocessing too large for memory, a
checkpoint whose analysis would not fit, weights that give NaN. Each reaches the notifier as a
plain message (no bug dialog), nothing is shown as a result, and the window keeps working."""

from __future__ import annotations

from pathlib import Path

import pyqtgraph as pg
import pytest
from checkpoint_cases import photo, tv_checkpoint
from PySide6.QtCore import QSettings

from vitviz.ui.main_window import MainWindow
from vitviz.ui.settings import AppSettings

WAIT_MS = 30_000


@pytest.fixture
def window(qtbot, tmp_path: Path):
    pg.setConfigOptions(imageAxisOrder="row-major")
    settings = AppSettings(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    w = MainWindow(settings)
    qtbot.addWidget(w)
    w.show()
    bugs: list[str] = []
    w.notifier.bugReported.connect(lambda summary, details: bugs.append(summary))
    yield w
    assert not bugs, f"the bug dialog was shown: {bugs}"


def _idle(window: MainWindow) -> bool:
    return not window.client.is_busy()


def _shown(qtbot, window: MainWindow, label: str) -> None:
    qtbot.waitUntil(
        lambda: (
            _idle(window) and window.viewer.image is not None and window.viewer.image.label == label
        ),
        timeout=WAIT_MS,
    )


def test_a_preprocessing_too_large_for_memory_is_refused_and_the_window_goes_on(
    qtbot, window: MainWindow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ckpt = tv_checkpoint(tmp_path)
    first, second = photo(tmp_path, "first.png"), photo(tmp_path, "second.png", (40, 56))
    window.open_paths([ckpt, first])
    _shown(qtbot, window, "first.png")
    assert window.viewer.image.grid == (4, 4)
    monkeypatch.setenv("VITVIZ_MEMORY_BUDGET", "1G")

    window.act_model_info.trigger()
    dialog = window.info_dialog
    dialog.height_box.setValue(1024)
    dialog.width_box.setValue(1024)
    with qtbot.waitSignal(window.notifier.userMessage, timeout=WAIT_MS) as blocker:
        dialog._apply()
    message = blocker.args[0]
    assert message.startswith("Preprocessing not changed: input size 1024×1024 gives 16,385")
    assert "GB of memory, but 1.0 GB is free" in message and "\n" not in message
    assert window.message_bar.text() == message
    qtbot.waitUntil(lambda: _idle(window), timeout=WAIT_MS)
    assert window.model.preprocessing["image_size"] == [32, 32]  # the old one stays

    window.open_image(second)  # still working, with the old preprocessing
    _shown(qtbot, window, "second.png")
    assert window.viewer.image.grid == (4, 4)


def test_checkpoints_whose_analysis_is_refused_leave_a_plain_message(
    qtbot, window: MainWindow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    image = photo(tmp_path)
    window.open_paths([tv_checkpoint(tmp_path, "good.pth"), image])
    _shown(qtbot, window, "photo.png")
    shown = window.viewer.image
    monkeypatch.setenv("VITVIZ_MEMORY_BUDGET", "1G")

    big = tv_checkpoint(tmp_path, "big.pth", settings={"preprocessing": {"image_size": 1024}})
    with qtbot.waitSignal(window.notifier.userMessage, timeout=WAIT_MS) as blocker:
        window.open_checkpoint(big)
    assert "photo.png: input size 1024×1024 gives 16,385 tokens" in blocker.args[0]
    qtbot.waitUntil(lambda: _idle(window), timeout=WAIT_MS)

    def nan(state: dict) -> dict:
        w = state["conv_proj.weight"].clone()
        w[0, 0, 0, 0] = float("nan")
        return {**state, "conv_proj.weight": w}

    with qtbot.waitSignal(window.notifier.userMessage, timeout=WAIT_MS) as blocker:
        window.open_checkpoint(tv_checkpoint(tmp_path, "nan.pth", edit=nan))
    assert "logits are NaN or infinite, so there is no prediction" in blocker.args[0]
    qtbot.waitUntil(lambda: _idle(window), timeout=WAIT_MS)
    assert window.viewer.image is shown  # no NaN result took its place

    window.open_checkpoint(tv_checkpoint(tmp_path, "again.pth", seed=1))
    window.open_image(image)
    v = window.viewer
    qtbot.waitUntil(
        lambda: _idle(window) and v.image is not shown and v.maps is not None, timeout=WAIT_MS
    )
    assert window.viewer.image.label == "photo.png"


def test_a_refusal_stays_until_the_model_changes(qtbot, window: MainWindow, tmp_path: Path):
    from vitviz.workers.messages import UserError

    image = photo(tmp_path)
    window.open_paths([tv_checkpoint(tmp_path, "good.pth"), image])
    _shown(qtbot, window, "photo.png")
    message = "The maps were refused on this model."
    window._on_user_error("maps", UserError(message, "error"))  # a job's refusal, as the engine's
    assert window.message_bar.isVisible() and window.message_bar.text() == message
    model = window.model
    window.set_preprocessing(dict(window.model.preprocessing))  # the same model, answered again
    qtbot.waitUntil(lambda: _idle(window) and window.model is not model, timeout=WAIT_MS)
    assert window.message_bar.isVisible() and window.message_bar.text() == message
    window.open_checkpoint(tv_checkpoint(tmp_path, "other.pth", seed=1))
    qtbot.waitUntil(lambda: _idle(window) and window.model.path.name == "other.pth",
                    timeout=WAIT_MS)  # fmt: skip
    assert not window.message_bar.isVisible()
