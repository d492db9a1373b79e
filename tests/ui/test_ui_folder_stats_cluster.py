"""The window's "Over a folder…" (Head statistics, Faithfulness) on a cluster: the address given
in a panel is kept in the settings (one for both panels) and the run goes to the cluster engine
(here a stand-in that measures in this process, so no Ray starts in a UI test; the real engine
is tested in tests/cluster) with the same progress, result and Cancel; empty, the local engine
runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from test_ui_folder_stats import image_folder
from test_ui_window import WAIT_MS, drop, new_window, wait_shown

import vitviz.workers.folder_stats_ray as on_cluster
from vitviz.checkpoints import load_checkpoint
from vitviz.cli.on_ray import image_items
from vitviz.pipeline.folder_stats import folder_statistics
from vitviz.workers.folder_faithfulness import folder_faithfulness_job
from vitviz.workers.folder_stats import folder_stats_job


def _fake_cluster(monkeypatch) -> list[str]:
    calls: list[str] = []

    def run(checkpoint, images, address, progress, preprocessing=None, gpus_per_worker=0.0):
        calls.append(address)
        return folder_statistics(load_checkpoint(checkpoint), images, checkpoint.name,
                                 progress=progress)  # fmt: skip

    monkeypatch.setattr(on_cluster, "folder_statistics_on_ray", run)
    return calls


def test_the_cluster_address_is_kept_and_the_folder_runs_there(
    qtbot, tiny_ckpt: Path, photo_files, tmp_path: Path, monkeypatch
) -> None:
    calls = _fake_cluster(monkeypatch)
    settings = tmp_path / "settings" / "vitviz.ini"
    window = new_window(qtbot, settings)
    image = photo_files["chelsea"]
    drop(window, [image, tiny_ckpt])
    wait_shown(qtbot, window, image.name)
    panel = window.viewer.stats_panel
    assert panel.cluster_address() is None  # the default: this computer
    folder = image_folder(tmp_path / "imgs", 3)
    with qtbot.waitSignal(window.folder_stats.finished, timeout=WAIT_MS):
        assert window.stats_over_folder(folder)
    assert calls == []  # the local engine
    panel.cluster.setText("  ray://head:10001 ")
    panel.cluster.editingFinished.emit()
    with qtbot.waitSignal(window.folder_stats.finished, timeout=WAIT_MS) as got:
        assert window.stats_over_folder(folder)
        assert "on the cluster at ray://head:10001" in panel.scope.text()
        assert not panel.cluster.isEnabled()
    assert calls == ["ray://head:10001"]
    assert panel.progress.maximum() == 3 and panel.progress.value() == 3
    assert panel.scope.text().startswith("Mean over 3 images of imgs") and panel.cluster.isEnabled()
    expected = folder_stats_job(tiny_ckpt, folder, lambda d, t: None, lambda: False)
    np.testing.assert_allclose(got.args[0].distance, expected.distance, rtol=1e-6)
    window.close()
    again = new_window(qtbot, settings)  # the address is a setting: kept for the next session
    assert again.viewer.stats_panel.cluster_address() == "ray://head:10001"


def test_cancel_stops_a_run_on_the_cluster(
    qtbot, tiny_ckpt: Path, photo_files, tmp_path: Path, monkeypatch
) -> None:
    calls = _fake_cluster(monkeypatch)
    window = new_window(qtbot, tmp_path / "settings" / "vitviz.ini")
    image = photo_files["chelsea"]
    drop(window, [image, tiny_ckpt])
    wait_shown(qtbot, window, image.name)
    panel = window.viewer.stats_panel
    panel.cluster.setText("auto")
    window.folder_stats.progress.connect(lambda done, total: window.folder_stats.cancel())
    with qtbot.waitSignal(window.folder_stats.cancelled, timeout=WAIT_MS):
        window.stats_over_folder(image_folder(tmp_path / "imgs", 40))
    assert calls == ["auto"]
    assert panel.scope.text() == "Cancelled." and panel.folder_result is None
    assert panel.over_folder.isEnabled() and panel.cluster.isEnabled()


def test_the_faithfulness_panel_measures_a_folder_on_the_cluster_in_the_settings(
    qtbot, tiny_ckpt: Path, photo_files, tmp_path: Path, monkeypatch
) -> None:
    """The address typed in the Head statistics panel is the Faithfulness panel's too; its
    "Over a folder…" sends the shown method's job there (with the GPUs per worker), shows the
    folder's mean curves, and Cancel stops a run."""
    calls: list[tuple] = []

    def run(command, job, images, address, each, **options):  # the cluster, in this process
        calls.append((command, address, options["gpus_per_worker"]))
        loaded = job.open()
        for item in image_items(images):
            each(job.run(loaded, [item])[0])

    monkeypatch.setattr(on_cluster, "run_on_cluster", run)
    window = new_window(qtbot, tmp_path / "settings" / "vitviz.ini")
    image = photo_files["chelsea"]
    drop(window, [image, tiny_ckpt])
    wait_shown(qtbot, window, image.name)
    stats, panel = window.viewer.stats_panel, window.viewer.faithfulness
    window.viewer.right_tabs.setCurrentWidget(stats)
    stats.cluster.setText("auto")
    stats.cluster.textEdited.emit("auto")  # typed there
    window.viewer.right_tabs.setCurrentWidget(panel)
    assert panel.cluster_address() == "auto" and not panel.cluster_row.gpus.isHidden()
    panel.cluster_row.gpus.setValue(0.5)
    folder = image_folder(tmp_path / "imgs", 3)
    runs = window.folder_faithfulness
    runs.steps = 2
    method = window.viewer.controls.method_name()
    with qtbot.waitSignal(runs.runner.finished, timeout=WAIT_MS) as got:
        assert runs.start(folder)
        assert "on the cluster at auto" in panel.status.text()
        assert not panel.over_folder.isEnabled() and not panel.cluster_row.isEnabled()
    assert calls == [("faithfulness", "auto", 0.5)]
    result = got.args[0]
    assert (result.method, result.images, result.steps) == (method, 3, 2)
    assert panel.status.text().startswith("Mean over 3 images of imgs")
    assert panel.progress.isHidden() and not panel.back.isHidden() and panel.over_folder.isEnabled()
    here = folder_faithfulness_job(tiny_ckpt, folder, lambda d, t: None, lambda: False,
                                   method=method, params=window.viewer.controls.method_values(),
                                   steps=2)  # fmt: skip
    shown = panel.deletion.curves["method"].getData()[1]
    np.testing.assert_allclose(shown, here.curves[method].deletion, atol=1e-6)
    assert f"{here.curves[method].insertion_auc:.3f}" in panel.numbers.text()
    runs.runner.progress.connect(lambda done, total: runs.runner.cancel())
    with qtbot.waitSignal(runs.runner.cancelled, timeout=WAIT_MS):
        assert runs.start(image_folder(tmp_path / "more", 6))
    assert panel.status.text() == "Cancelled." and panel.over_folder.isEnabled()
    assert len(calls) == 2
