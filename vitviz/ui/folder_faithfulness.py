"""The Faithfulness panel's "Over a folder…" in the window: the run of the shown method (and
its parameters on screen) against random over a folder, on a thread of its own, here or on the
Ray cluster in the settings (DESIGN §7), its progress, result and Cancel wired to the panel."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject

from vitviz.workers.folder_faithfulness import FolderFaithfulnessResult, FolderFaithfulnessRunner

STEPS = 20  # as the panel's measure of one image


class FolderFaithfulness(QObject):
    """Owns the runner; ``start(folder)`` measures the folder with the window's model."""

    def __init__(self, window: Any) -> None:
        super().__init__(window)
        self.window = window
        self.panel = window.viewer.faithfulness
        self.panel.app_settings = window.settings
        self.runner = FolderFaithfulnessRunner(self)
        self.steps = STEPS
        self.panel.folderRequested.connect(self.start)
        self.panel.cancelRequested.connect(self.runner.cancel)
        self.runner.progress.connect(self.panel.set_progress)
        self.runner.finished.connect(self._show)
        self.runner.cancelled.connect(lambda: self.panel.set_folder_idle("Cancelled."))
        self.runner.failed.connect(self._failed)

    def _label(self, method: str) -> str:
        info = self.window.viewer.controls.methods.get(method)
        return info.label if info else method

    def start(self, folder: str | Path) -> bool:
        """Measure every image of ``folder``; False (and said) when it can't start."""
        model = self.window.model
        if model is None or model.path is None or model.family == "model-code":
            self.window.notifier.user_error(
                "Faithfulness over a folder needs a model opened from a checkpoint file: open one."
            )
            return False
        if self.runner.is_running():
            self.window.notifier.user_error("A folder is being measured already: cancel it first.")
            return False
        controls = self.window.viewer.controls
        method = controls.method_name()
        self.panel.set_running(Path(folder), self._label(method))
        self.runner.start(
            Path(model.path),
            Path(folder),
            method=method,
            params=controls.method_values(),  # the map on screen (CLS query, top class)
            steps=self.steps,
            preprocessing=model.preprocessing,
            device=self.window.device_combo.currentText() or "cpu",
            address=self.panel.cluster_address(),
            gpus_per_worker=self.panel.cluster_row.gpus_per_worker(),
        )
        return True

    def _show(self, result: FolderFaithfulnessResult) -> None:
        self.panel.show_folder(result, self._label(result.method))

    def _failed(self, message: str) -> None:
        self.panel.set_folder_idle(f"Not measured: {message}")
        self.window.notifier.user_error(message)

    def shutdown(self) -> None:
        """The window closes: stop a run (waiting a little for its thread)."""
        self.runner.cancel()
        self.runner.wait(5.0)
