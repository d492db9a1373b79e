"""Where the window's folder runs go ("Folders run on:"): this computer, or a Ray cluster's
address with the GPUs each of its workers reserves (DESIGN §7). One setting for the window: the
Head statistics' and the Faithfulness panel's rows show and change the same values."""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import QDoubleSpinBox, QHBoxLayout, QLabel, QLineEdit, QWidget

from vitviz.ui.settings import AppSettings

CLUSTER_KEY = "stats/cluster_address"  # the Ray cluster folders run on ("": this computer)
GPUS_KEY = "cluster/gpus_per_worker"  # GPUs each of its workers reserves (0: none, the CPU)


class ClusterRow(QWidget):
    """``address`` (a line edit; empty: this computer) and ``gpus`` (GPUs per worker, used only
    with an address), both kept in the window's settings as they are typed."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.address = QLineEdit()
        self.address.setPlaceholderText("this computer")
        self.address.setClearButtonEnabled(True)
        self.address.setToolTip(
            "Where “Over a folder…” measures the images: empty for this computer, or a Ray "
            "cluster's address (auto: the cluster this computer belongs to; ray://host:10001) "
            "(docs/cluster.md)"
        )
        self.gpus = QDoubleSpinBox()
        self.gpus.setRange(0.0, 8.0)
        self.gpus.setSingleStep(0.25)
        self.gpus.setDecimals(2)
        self.gpus.setSuffix(" GPU")
        self.gpus.setToolTip(
            "GPUs each of the cluster's workers reserves (a fraction shares a GPU; 0: the "
            "workers run on CPUs); one worker per share of the cluster's GPUs"
        )
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(QLabel("Folders run on:"))
        layout.addWidget(self.address, 1)
        self.per_worker = QLabel("per worker")
        layout.addWidget(self.gpus)
        layout.addWidget(self.per_worker)
        self._settings: AppSettings | None = None
        self.address.textEdited.connect(self._remember)
        self.address.editingFinished.connect(self._remember)
        self.gpus.valueChanged.connect(self._remember)
        self._show_gpus()

    def bind(self, settings: AppSettings | None) -> None:
        """Read (and from now on keep) the values in ``settings``."""
        self._settings = settings
        self.reload()

    def reload(self) -> None:
        """The values in the settings (the other panel's row may have changed them)."""
        if self._settings is None:
            return
        self.address.setText(str(self._settings.get(CLUSTER_KEY, "", str) or ""))
        self.gpus.blockSignals(True)
        self.gpus.setValue(float(self._settings.get(GPUS_KEY, 0.0, float) or 0.0))
        self.gpus.blockSignals(False)
        self._show_gpus()

    def cluster_address(self) -> str | None:
        """The Ray cluster's address folders are measured on; None: this computer."""
        return self.address.text().strip() or None

    def gpus_per_worker(self) -> float:
        """GPUs each worker reserves (0 without an address: it does not apply)."""
        return float(self.gpus.value()) if self.cluster_address() else 0.0

    def _show_gpus(self) -> None:
        on_cluster = self.cluster_address() is not None
        self.gpus.setVisible(on_cluster)
        self.per_worker.setVisible(on_cluster)

    def _remember(self, *_: Any) -> None:
        self._show_gpus()
        if self._settings is not None:
            self._settings.set(CLUSTER_KEY, self.address.text().strip())
            self._settings.set(GPUS_KEY, float(self.gpus.value()))

    def showEvent(self, event: Any) -> None:
        self.reload()
        super().showEvent(event)


class FolderRunsOn:
    """What a panel with a ``cluster_row`` (a ``ClusterRow``) and ``_app_settings`` says of
    where its folder runs go; mixed into the Head statistics' and the Faithfulness panel."""

    cluster_row: ClusterRow
    _app_settings: AppSettings | None

    @property
    def app_settings(self) -> AppSettings | None:
        """The window's settings: where the folder dialog opens, the cluster address."""
        return self._app_settings

    @app_settings.setter
    def app_settings(self, settings: AppSettings | None) -> None:
        self._app_settings = settings
        self.cluster_row.bind(settings)

    def cluster_address(self) -> str | None:
        """The Ray cluster's address folders are measured on; None: this computer."""
        return self.cluster_row.cluster_address()
