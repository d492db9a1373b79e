"""The Head statistics panel: the plots of ``HeadStatsView`` for the image on screen, or averaged
over a folder of images (as the ViT paper's mean-attention-distance figure is), with the run's
progress and a Cancel button."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from vitviz.ui import file_dialogs
from vitviz.ui.charts import HeadStatsView
from vitviz.ui.cluster_row import ClusterRow, FolderRunsOn
from vitviz.ui.settings import AppSettings
from vitviz.ui.view_state import stats_notes
from vitviz.workers.folder_stats import FolderStatsResult


class StatsPanel(FolderRunsOn, QWidget):
    """``folderRequested(folder)`` asks for the statistics over a folder; ``cancelRequested``
    stops that run. The window answers with ``set_progress``, ``show_folder`` or ``set_idle``."""

    folderRequested = Signal(object)  # Path of a folder of images
    cancelRequested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.view = HeadStatsView()
        self.scope = QLabel("This image.")
        self.scope.setWordWrap(True)
        self.over_folder = QPushButton("Over a folder…")
        self.over_folder.setToolTip(
            "Average each head's statistics over every image of a folder (the ViT paper's "
            "mean attention distance is such an average), with the current model"
        )
        self.back = QPushButton("This image")
        self.back.setToolTip("Show the statistics of the image on screen again")
        self.back.hide()
        self.progress = QProgressBar()
        self.progress.hide()
        self.cancel = QPushButton("Cancel")
        self.cancel.hide()
        buttons = QHBoxLayout()
        buttons.addWidget(self.over_folder)
        buttons.addWidget(self.back)
        buttons.addWidget(self.progress, 1)
        buttons.addWidget(self.cancel)
        buttons.addStretch(0)
        self.cluster_row = ClusterRow()  # this computer, or a Ray cluster (the settings')
        self.cluster = self.cluster_row.address
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(buttons)
        layout.addWidget(self.cluster_row)
        layout.addWidget(self.scope)
        layout.addWidget(self.view, 1)
        self._image_stats: tuple | None = None  # what set_statistics last got for the image
        self.folder_result: FolderStatsResult | None = None
        self._app_settings: AppSettings | None = None
        self.over_folder.clicked.connect(self._choose_folder)
        self.cancel.clicked.connect(self.cancelRequested)
        self.back.clicked.connect(self.show_image)

    # -- the image on screen ---------------------------------------------------------------------
    def set_statistics(
        self,
        distance: np.ndarray,
        entropy: np.ndarray,
        prefix: np.ndarray,
        norms: np.ndarray,
        num_prefix: int,
        labels: list[str] | None = None,
        axis: str = "layer",
    ) -> None:
        """A new image's (L, H) statistics and (L, N) token norms (shown unless a folder is);
        ``labels``: names of the rows (e.g. a Swin's "stage.block"), None for layers 1..L;
        ``axis``: what the rows are ("layer", "block (stage.block)")."""
        self._image_stats = (distance, entropy, prefix, norms, num_prefix, labels, axis)
        if self.folder_result is None:
            self.view.set_statistics(*self._image_stats)

    def show_image(self) -> None:
        self.folder_result = None
        self.back.hide()
        self.scope.setText("This image.")
        if self._image_stats is not None:
            self.view.set_statistics(*self._image_stats)

    # -- a folder --------------------------------------------------------------------------------
    def _choose_folder(self) -> None:
        title = "Head statistics over a folder of images"
        folder = file_dialogs.open_folder(self, self.app_settings, "images", title)
        if folder:
            self.folderRequested.emit(Path(folder))

    def set_running(self, folder: Path) -> None:
        self.over_folder.setEnabled(False)
        self.cluster_row.setEnabled(False)
        self.progress.setRange(0, 0)  # until the first image is done
        self.progress.setFormat("%v / %m images")
        self.progress.show()
        self.cancel.show()
        self.cancel.setEnabled(True)
        address = self.cluster_address()
        where = f" on the cluster at {address}" if address else ""
        self.scope.setText(f"Measuring the images of {folder}{where}…")

    def set_progress(self, done: int, total: int) -> None:
        self.progress.setRange(0, total)
        self.progress.setValue(done)

    def set_idle(self, message: str | None = None) -> None:
        """The run ended without a result (cancelled or failed): say so, keep what is shown."""
        self.over_folder.setEnabled(True)
        self.cluster_row.setEnabled(True)
        self.progress.hide()
        self.cancel.hide()
        if message is not None:
            self.scope.setText(message)

    def show_folder(self, result: FolderStatsResult) -> None:
        """The folder's means, one dot per head (token norms are per image: left empty)."""
        self.set_idle()
        self.folder_result = result
        layers, _ = result.distance.shape
        norms = np.zeros((layers, 0), dtype=np.float32)
        prefix = self._image_stats[4] if self._image_stats is not None else 0
        notes = stats_notes(
            result.distance, result.entropy, result.prefix_share, norms, prefix, False
        )
        self.view.set_statistics(
            result.distance, result.entropy, result.prefix_share, norms, 0, notes=notes
        )
        skipped = f"; {len(result.failed)} could not be read" if result.failed else ""
        self.scope.setText(
            f"Mean over {result.images} images of {result.folder.name} "
            f"({result.checkpoint}){skipped}."
        )
        self.back.show()
