"""Head statistics ▸ Over a folder…: the job averages what analyze() gives per image,
reports progress and stops when cancelled; the window runs it off the GUI thread and shows it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from test_ui_window import WAIT_MS, drop, new_window, wait_shown

from vitviz.checkpoints import load_checkpoint
from vitviz.core.errors import VitvizError
from vitviz.pipeline.analysis import analyze
from vitviz.ui.main_window import MainWindow
from vitviz.workers.folder_stats import RunCancelledError, folder_stats_job


def image_folder(folder: Path, count: int) -> Path:
    folder.mkdir()
    rng = np.random.default_rng(3)
    for i in range(count):
        pixels = rng.integers(0, 256, (40 + 4 * i, 48, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"img{i}.png")
    (folder / "notes.txt").write_text("not an image")  # passed over, not an error
    return folder


def test_job_averages_the_per_image_statistics(tiny_ckpt: Path, tmp_path: Path) -> None:
    folder = image_folder(tmp_path / "imgs", 3)
    seen: list[tuple[int, int]] = []
    result = folder_stats_job(tiny_ckpt, folder, lambda d, t: seen.append((d, t)), lambda: False)
    assert seen == [(1, 3), (2, 3), (3, 3)]
    loaded = load_checkpoint(tiny_ckpt)
    per_image = [analyze(loaded, p) for p in sorted(folder.glob("*.png"))]
    for name, attr in (
        ("distance", "mean_distance"),
        ("entropy", "entropy"),
        ("prefix_share", "prefix_share"),
    ):
        stack = np.stack([getattr(a, attr).numpy() for a in per_image]).astype(np.float64)
        np.testing.assert_allclose(getattr(result, name), stack.mean(0), rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose(
            getattr(result, name + "_std"), stack.std(0), rtol=1e-5, atol=1e-9
        )
    assert result.images == 3 and result.failed == ()


def test_job_stops_when_cancelled_and_refuses_an_empty_folder(tiny_ckpt, tmp_path) -> None:
    folder = image_folder(tmp_path / "imgs", 4)
    done: list[int] = []
    with pytest.raises(RunCancelledError):
        folder_stats_job(tiny_ckpt, folder, lambda d, t: done.append(d), lambda: bool(done))
    assert done == [1]  # stopped right after the first image
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(VitvizError, match="holds no images"):
        folder_stats_job(tiny_ckpt, empty, lambda d, t: None, lambda: False)


@pytest.fixture
def window(qtbot, tmp_path: Path) -> MainWindow:
    return new_window(qtbot, tmp_path / "settings" / "vitviz.ini")


def test_window_shows_the_folder_means_then_the_image_again(
    qtbot, window: MainWindow, tiny_ckpt: Path, photo_files, tmp_path: Path
) -> None:
    image = photo_files["chelsea"]
    drop(window, [image, tiny_ckpt])
    wait_shown(qtbot, window, image.name)
    panel = window.viewer.stats_panel
    prefix_plot = panel.view.plots["prefix"].getPlotItem()
    shown = lambda: prefix_plot.listDataItems()[0].getData()[1]  # noqa: E731
    image_prefix = shown().copy()
    folder = image_folder(tmp_path / "imgs", 3)
    with qtbot.waitSignal(window.folder_stats.finished, timeout=WAIT_MS) as got:
        assert window.stats_over_folder(folder)
        assert not panel.cancel.isHidden() and not panel.over_folder.isEnabled()
    result = got.args[0]
    np.testing.assert_allclose(shown(), 100 * result.prefix_share.reshape(-1), rtol=1e-6)
    assert panel.scope.text().startswith("Mean over 3 images of imgs")
    assert panel.cancel.isHidden() and panel.progress.isHidden()
    assert panel.progress.value() == 3
    expected = folder_stats_job(tiny_ckpt, folder, lambda d, t: None, lambda: False)
    np.testing.assert_allclose(result.distance, expected.distance, rtol=1e-6)
    panel.back.click()
    np.testing.assert_allclose(shown(), image_prefix)
    assert panel.scope.text() == "This image."


def test_window_cancel_leaves_the_image_statistics(
    qtbot, window: MainWindow, tiny_ckpt: Path, photo_files, tmp_path: Path, monkeypatch
) -> None:
    image = photo_files["chelsea"]
    drop(window, [image, tiny_ckpt])
    wait_shown(qtbot, window, image.name)
    panel = window.viewer.stats_panel
    folder = image_folder(tmp_path / "imgs", 40)
    window.folder_stats.progress.connect(lambda done, total: window.folder_stats.cancel())
    with qtbot.waitSignal(window.folder_stats.cancelled, timeout=WAIT_MS):
        window.stats_over_folder(folder)
    assert panel.scope.text() == "Cancelled." and panel.folder_result is None
    assert panel.over_folder.isEnabled()


def test_window_needs_a_checkpoint_file(qtbot, window: MainWindow, tmp_path: Path) -> None:
    folder = image_folder(tmp_path / "imgs", 1)
    assert not window.stats_over_folder(folder)
    assert "checkpoint" in window.message_bar.text()
    assert not window.folder_stats.is_running()
