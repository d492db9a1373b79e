"""MainWindow: menus, toolbar, drag-and-drop, the tabs, status bar, settings, one error path."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import shiboken6
from PySide6.QtCore import QBuffer, QByteArray, QIODevice, Qt, QTimer
from PySide6.QtGui import (
    QAction,
    QCloseEvent,
    QDragEnterEvent,
    QDropEvent,
    QGuiApplication,
    QKeySequence,
)
from PySide6.QtWidgets import (
    QApplication,
    QComboBox,
    QLabel,
    QMainWindow,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QTabWidget,
    QToolBar,
    QVBoxLayout,
    QWidget,
)

from vitviz import __version__
from vitviz.core import resources
from vitviz.core.filekinds import CHECKPOINT_SUFFIXES, file_kind
from vitviz.core.model_ids import parse_model_ref
from vitviz.imaging.loading import IMAGE_EXTENSIONS, list_images
from vitviz.modelcode import ModelCodeSpec
from vitviz.ui import file_dialogs
from vitviz.ui.cache_dialog import CacheDialog
from vitviz.ui.checkpoint_settings_dialog import CheckpointSettingsDialog
from vitviz.ui.compare_window import CompareWindow
from vitviz.ui.download_dialog import DownloadDialog
from vitviz.ui.errors import ErrorNotifier, MessageBar
from vitviz.ui.families_dialog import FamiliesDialog
from vitviz.ui.features_tab import FeaturesTab
from vitviz.ui.folder_faithfulness import FolderFaithfulness
from vitviz.ui.knockout import KnockoutController
from vitviz.ui.model_code_dialog import ModelCodeDialog
from vitviz.ui.model_info_dialog import ModelInfoDialog
from vitviz.ui.settings import AppSettings
from vitviz.ui.training_tab import TrainingTab
from vitviz.ui.viewer_tab import ViewerTab
from vitviz.ui.wheel_guard import guard_wheel
from vitviz.workers import compare_jobs, jobs
from vitviz.workers.engine import EngineClient
from vitviz.workers.folder_stats import FolderStatsRunner
from vitviz.workers.messages import (
    CompareResult,
    FaithfulnessResult,
    FeaturesResult,
    ImageResult,
    MapsResult,
    ModelSummary,
    UserError,
)

ASSUMED_STYLE = "color: #7a4f00; background: #fff1c7; padding: 1px 6px; border-radius: 3px;"
# Where a prefilled guess comes from, by setting (the dialog shows it beside the value).
ASKED_GUESS = {
    "activation": "timm's default; the weights can't tell",
    "heads": "a divisor of the width near timm's 64 per head",
    "image_size": "one grid the position table fits (not the only one)",
}
CONVENTION_GUESS = "timm's convention for these tensors"
DEFAULT_SIZE = (1400, 900)  # the first window at least, where the screen has room for it
SCREEN_SHARE = 0.88  # … and this share of a larger screen's free area, each way
FRAME_ROOM = (16, 48)  # what a window manager's frame and title bar may add, in pixels
COMPARE_SIZE = (1400, 760)  # the compare window, where the screen has room for it


def model_words(summary: ModelSummary) -> str:
    """The model's name as people know it, and its architecture beside it where that says
    more ("timm/vit_small_patch16_224.augreg_in21k_ft_in1k · vit_small_patch16_224")."""
    from vitviz.core.model_names import name_and_architecture

    return name_and_architecture(summary.name, summary.arch)


def model_line(summary: ModelSummary) -> str:
    """The status bar's line about the model on screen: its name, family, shape and classes."""
    shape = summary.headline or f"{summary.depth} layers × {summary.heads} heads"
    return f"{model_words(summary)} ({summary.family}, {shape}, {summary.num_classes} classes)"


def plain_text(text: str) -> str:
    """A menu text without its mnemonic marks ("Open &image…" -> "Open image…")."""
    return text.replace("&&", "\0").replace("&", "").replace("\0", "&")


IMAGE_FILTER = "Images (" + " ".join(f"*{s}" for s in sorted(IMAGE_EXTENSIONS)) + ")"
CHECKPOINT_FILTER = "Checkpoints (" + " ".join(f"*{s}" for s in sorted(CHECKPOINT_SUFFIXES)) + ")"
BUSY_DELAY_MS = 500


def fitted_size(want: tuple[int, int], free: tuple[int, int] | None) -> tuple[int, int]:
    """``want`` (width, height), made smaller where a screen's ``free`` area (None: unknown)
    can't hold it with a window frame."""
    if free is None:
        return want
    return min(want[0], free[0] - FRAME_ROOM[0]), min(want[1], free[1] - FRAME_ROOM[1])


def first_window_size(free_width: int, free_height: int) -> tuple[int, int]:
    """The first window's size on a screen whose free area is ``free_width`` × ``free_height``:
    SCREEN_SHARE of it each way, at least DEFAULT_SIZE, never more than fits with a frame."""
    want = (
        max(DEFAULT_SIZE[0], round(SCREEN_SHARE * free_width)),
        max(DEFAULT_SIZE[1], round(SCREEN_SHARE * free_height)),
    )
    return min(want[0], free_width - FRAME_ROOM[0]), min(want[1], free_height - FRAME_ROOM[1])


class MainWindow(QMainWindow):
    def __init__(self, settings: AppSettings | None = None) -> None:
        super().__init__()
        self.setWindowTitle("vitviz")
        self.setAcceptDrops(True)
        self.settings = settings or AppSettings()
        self.client = EngineClient(self)
        self.model: ModelSummary | None = None
        self.devices: list[str] = []
        self._requested_source: object = None  # the newest image asked for
        self._shown_source: object = None  # the image on screen
        self._requested_label = ""
        self._shown_label = ""
        self._model_pending = False  # a model is being opened (an image alone waits for it)
        self._job_message = ""  # the last word about the model on screen (a job's refusal)
        self.folder_images: list[Path] = []
        self.folder_index = -1

        self.message_bar = MessageBar()
        self.notifier = ErrorNotifier(self.message_bar, self)
        self.viewer = ViewerTab(self.client)
        self.tabs = QTabWidget()
        self.tabs.addTab(self.viewer, "Viewer")
        self.features = FeaturesTab(self.client)  # what the tokens carry (DESIGN §5)
        self.compare: CompareWindow | None = None  # File ▸ Compare with… (DESIGN §5)
        self.tabs.addTab(self.features, "Features")
        self.features.set_showing(False)  # its jobs run while it shows (the Viewer does now)
        self.tabs.currentChanged.connect(
            lambda _i: self.features.set_showing(self.tabs.currentWidget() is self.features)
        )
        self.training = TrainingTab()
        self.training.app_settings = self.viewer.stats_panel.app_settings = self.settings
        self.tabs.addTab(self.training, "Training")
        self.training.openCheckpoint.connect(self.open_trained)
        self.training.compareCheckpoints.connect(self.compare_trained)
        self.training.message.connect(lambda text: self.notifier.user_error(text))
        central = QWidget()
        layout = QVBoxLayout(central)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addWidget(self.message_bar)
        layout.addWidget(self.tabs, 1)
        self.setCentralWidget(central)

        self._make_status_bar()
        self._make_actions()
        self._make_menus_and_toolbar()
        self._restore_settings()

        self.client.resultReady.connect(self._on_result)
        self.client.userError.connect(self._on_user_error)
        self.client.failed.connect(self._on_failed)
        self.client.busyChanged.connect(self._on_busy)
        self.client.passProgress.connect(self._on_passes)
        self.viewer.hoverText.connect(self.hover_label.setText)
        self.viewer.prompt_box.applyRequested.connect(self.apply_prompts)
        self.folder_stats = FolderStatsRunner(self)
        panel = self.viewer.stats_panel
        panel.folderRequested.connect(self.stats_over_folder)
        panel.cancelRequested.connect(self.folder_stats.cancel)
        self.folder_stats.progress.connect(panel.set_progress)
        self.folder_stats.finished.connect(panel.show_folder)
        self.folder_stats.cancelled.connect(lambda: panel.set_idle("Cancelled."))
        self.folder_stats.failed.connect(self._folder_stats_failed)
        self.knockout = KnockoutController(self)  # toolbar toggles, grid overlay, status line
        self.folder_faithfulness = FolderFaithfulness(self)  # the panel's "Over a folder…"
        guard_wheel(self)  # no combo, spin box or slider changes on the wheel unless focused

    # -- construction -------------------------------------------------------------------------
    def _make_status_bar(self) -> None:
        bar = self.statusBar()
        self.hover_label = QLabel("")
        self.model_label = QLabel("no model")
        self.device_label = QLabel("device: starting…")
        self.progress = QProgressBar()
        self.progress.setRange(0, 0)
        self.progress.setMaximumWidth(120)
        self.progress.hide()
        bar.addWidget(self.hover_label, 1)
        bar.addPermanentWidget(self.progress)
        self.passes_cancel = QPushButton("Cancel")  # a long method's forward passes
        self.passes_cancel.setToolTip("Stop this map's forward passes")
        self.passes_cancel.hide()
        self.passes_cancel.clicked.connect(self._cancel_passes)
        self._passes_channel = ""
        bar.addPermanentWidget(self.passes_cancel)
        self.assumed_label = QLabel("")  # the settings opened on a guess, until confirmed
        self.assumed_label.setStyleSheet(ASSUMED_STYLE)
        self.assumed_label.hide()
        bar.addPermanentWidget(self.model_label)
        bar.addPermanentWidget(self.assumed_label)
        bar.addPermanentWidget(self.device_label)
        self._busy_timer = QTimer(self, singleShot=True, interval=BUSY_DELAY_MS)
        self._busy_timer.timeout.connect(self.progress.show)

    def _action(
        self, text: str, slot, shortcut: QKeySequence | str | None = None, tip: str = ""
    ) -> QAction:
        action = QAction(text, self)
        if shortcut is not None:
            action.setShortcut(QKeySequence(shortcut))
        action.setStatusTip(tip or plain_text(text))
        action.triggered.connect(slot)
        self.addAction(action)
        return action

    def _make_actions(self) -> None:
        a = self._action
        self.act_open_image = a("Open &image…", self.open_image_dialog, "Ctrl+O")
        self.act_open_ckpt = a("Open &checkpoint…", self.open_checkpoint_dialog, "Ctrl+Shift+O")
        self.act_open_code = a(
            "Open model &code…",
            self.open_model_code_dialog,
            "Ctrl+Shift+M",
            "Open a ViT written in a Python file (class or function, arguments, state dict)",
        )
        self.act_open_cache = a(
            "Open from &cache…",
            lambda: self.client.submit("cache", jobs.list_cache),
            None,
            "Checkpoints already in the Hugging Face and torch hub caches on this disk",
        )
        self.act_download = a(
            "&Download a model…",
            lambda: self.download_dialog(),
            None,
            "ViTs from the Hugging Face Hub (or any model id), into its cache, then opened",
        )
        self.act_open_folder = a("Open image &folder…", self.open_folder_dialog, "Ctrl+Alt+O")
        self.act_paste = a("&Paste image", self.paste, "Ctrl+V")
        self.act_prev = a("Previous image", partial(self.step_folder, -1), "Alt+Left")
        self.act_next = a("Next image", partial(self.step_folder, 1), "Alt+Right")
        self.act_export_view = a(
            "&Export view as PNG…", partial(self.export_dialog, "view"), "Ctrl+E"
        )
        self.act_export_heads = a(
            "Export head grid as PNG…", partial(self.export_dialog, "heads"), "Ctrl+Shift+E"
        )
        self.act_export_npz = a(
            "Export numbers (.npz)…", partial(self.export_dialog, "npz"), "Ctrl+Alt+E"
        )
        self.act_compare = a("&Compare with…", self.compare_dialog)
        self.act_model_info = a(
            "Model and &preprocessing…",
            self.model_info_dialog,
            "Ctrl+I",
            "What the checkpoint is, and how images are prepared for it (editable)",
        )
        self.act_model_settings = a(
            "&Settings…",
            self.confirm_model_settings,
            tip="Confirm or change the settings the model was opened with on a guess",
        )
        self.act_quit = a("&Quit", self.close, QKeySequence.StandardKey.Quit)
        self.act_about = a("&About vitviz", self.about)
        self.act_families = a("&Supported checkpoints…", self.show_families)
        ctl = self.viewer.controls
        self.act_head_prev = a("Previous head", partial(ctl.step_head, -1), "Left")
        self.act_head_next = a("Next head", partial(ctl.step_head, 1), "Right")
        self.act_layer_prev = a("Previous layer", partial(ctl.step_layer, -1), "PgUp")
        self.act_layer_next = a("Next layer", partial(ctl.step_layer, 1), "PgDown")
        self.act_layer_up = a("Layer up", partial(ctl.step_layer, -1), "Up")
        self.act_layer_down = a("Layer down", partial(ctl.step_layer, 1), "Down")
        for act in (self.act_head_prev, self.act_head_next, self.act_layer_up, self.act_layer_down):
            act.setShortcutContext(Qt.ShortcutContext.WindowShortcut)

    def _make_menus_and_toolbar(self) -> None:
        menu = self.menuBar().addMenu("&File")
        for act in (
            self.act_open_image,
            self.act_open_ckpt,
            self.act_open_code,
            self.act_open_cache,
            self.act_download,
            self.act_open_folder,
            self.act_paste,
        ):
            menu.addAction(act)
        self.recent_menu = menu.addMenu("Open &recent")
        self.recent_menu.aboutToShow.connect(self._fill_recent)
        menu.addSeparator()
        for act in (self.act_export_view, self.act_export_heads, self.act_export_npz):
            menu.addAction(act)
        menu.addSeparator()
        menu.addAction(self.act_compare)
        menu.addSeparator()
        menu.addAction(self.act_quit)
        view = self.menuBar().addMenu("&View")
        for act in (
            self.act_prev,
            self.act_next,
            self.act_head_prev,
            self.act_head_next,
            self.act_layer_prev,
            self.act_layer_next,
        ):
            view.addAction(act)
        model_menu = self.menuBar().addMenu("&Model")
        model_menu.addAction(self.act_model_info)
        model_menu.addAction(self.act_download)
        model_menu.addAction(self.act_model_settings)
        self.samples_menu = self.menuBar().addMenu("&Samples")
        self._fill_samples()
        help_menu = self.menuBar().addMenu("&Help")
        help_menu.addAction(self.act_families)
        help_menu.addAction(self.act_about)

        tb = QToolBar("Main")
        tb.setObjectName("mainToolbar")
        tb.setMovable(False)
        for act in (self.act_open_image, self.act_open_ckpt, self.act_open_folder):
            tb.addAction(act)
        tb.addSeparator()
        tb.addAction(self.act_prev)
        tb.addAction(self.act_next)
        tb.addSeparator()
        tb.addAction(self.act_export_view)
        tb.addSeparator()
        tb.addWidget(QLabel(" Device: "))
        self.device_combo = QComboBox()
        self.device_combo.addItem("cpu")
        self.device_combo.setEnabled(False)
        self.device_combo.currentTextChanged.connect(self.set_device)
        tb.addWidget(self.device_combo)
        self.addToolBar(tb)

    def _restore_settings(self) -> None:
        geometry = self.settings.get("window/geometry")
        if geometry is None or not self.restoreGeometry(geometry):
            self.fit_to_screen()
        self.viewer.restore_settings(self.settings)

    def fit_to_screen(self) -> None:
        """The first window, centred on the screen's free area (``first_window_size``)."""
        screen = self.screen() or QGuiApplication.primaryScreen()
        if screen is None:
            self.resize(*DEFAULT_SIZE)
            return
        free = screen.availableGeometry()
        width, height = first_window_size(free.width(), free.height())
        self.resize(width, height)
        self.move(free.x() + (free.width() - width) // 2, free.y() + (free.height() - height) // 2)

    def closeEvent(self, event: QCloseEvent) -> None:
        s = self.settings
        s.set("window/geometry", self.saveGeometry())
        self.viewer.save_settings(s)
        s.set("device", self.device_combo.currentText())
        self.training.runner.shutdown()
        self.folder_stats.cancel()
        self.folder_stats.wait(5.0)
        self.folder_faithfulness.shutdown()
        self.client.shutdown()
        super().closeEvent(event)

    def _fill_samples(self) -> None:
        """The shipped model (always one click away) and the sample images."""
        menu = self.samples_menu
        menu.clear()
        model = resources.default_model_path()
        act = menu.addAction("Default model (shapes ViT)")
        act.setEnabled(model is not None)
        if model is not None:
            act.triggered.connect(partial(self.open_checkpoint, model))
        menu.addSeparator()
        for path in resources.sample_images():
            menu.addAction(path.stem.replace("_", " ")).triggered.connect(
                partial(self._open_sample, path)
            )

    def _open_sample(self, path: Path) -> None:
        self.folder_images = []
        self.open_image(path)

    def open_defaults(self) -> None:
        """First launch: the shipped model with the first sample image."""
        model = resources.default_model_path()
        samples = resources.sample_images()
        if model is None:
            return
        self.open_checkpoint(model)
        if samples:
            self.open_image(samples[0])

    # -- start ----------------------------------------------------------------------------------
    def start(self, paths: list[str] | None = None, defaults: bool = False) -> None:
        """Import torch in the engine thread (the window is already up), then open ``paths``
        (or, with ``defaults``, the shipped model and a sample)."""
        self.client.submit("warmup", lambda state: jobs.warm_up())
        self.refresh_methods()
        if paths:
            self.open_paths(paths)
        elif defaults:
            self.open_defaults()

    # -- opening things -----------------------------------------------------------------------
    def open_paths(self, paths: list[str | Path]) -> None:
        """Open whatever was given: checkpoints first, then images / folders."""
        checkpoints, images, unknown, model_ids = [], [], [], []
        for path in paths:
            kind = file_kind(path)
            if kind == "missing" and parse_model_ref(str(path)) is not None:
                model_ids.append(str(path))  # a Hugging Face model id: from the cache or the hub
            elif kind in ("checkpoint", "checkpoint_folder"):
                checkpoints.append(Path(path))
                file_dialogs.remember(self.settings, "checkpoints", Path(path).parent)
            elif kind in ("image", "image_folder"):
                images.append(Path(path))
                file_dialogs.remember(self.settings, "images", path)
            elif kind == "missing":
                unknown.append(f"{Path(path).name}: no such file")
            else:
                unknown.append(f"{Path(path).name} is neither an image nor a checkpoint")
        if unknown:
            self.notifier.user_error(
                "; ".join(unknown) + ". Accepted: images (PNG, JPEG, …), "
                "checkpoints (.safetensors, .pth, .pt, .bin) and folders."
            )
        if model_ids and not checkpoints:
            self.download_dialog(model_ids[-1])
        elif checkpoints:
            self.open_checkpoint(checkpoints[-1])
        for path in images:
            if path.is_dir():
                self.open_folder(path)
            else:
                self.open_image(path)

    def open_checkpoint(self, path: str | Path, config: dict | None = None) -> int:
        path = Path(path)
        self._model_pending = True
        self.model_label.setText(f"loading {path.name}…")
        return self.client.submit("model", partial(jobs.load_model, path=path, config=config))

    def download_dialog(self, model_id: str | None = None) -> DownloadDialog:
        """Model ▸ Download a model…: the curated list and an id box; with ``model_id`` (a
        model id given on the command line or dropped), that id's files are read at once (a
        cached one opens at once)."""
        from vitviz.checkpoints.hub_catalogue import curated_models
        from vitviz.checkpoints.hub_paths import hf_hub_cache

        as_of, models = curated_models()
        dialog = DownloadDialog(models, as_of, str(hf_hub_cache()), self)
        self.hub_dialog = dialog  # kept for tests
        dialog.openRequested.connect(lambda path, _id: self.open_checkpoint(path))
        dialog.show()
        if model_id:
            dialog.id_box.setText(model_id)
            dialog.start()
        return dialog

    def model_info_dialog(self) -> None:
        if self.model is None:
            self.notifier.user_error("No model is open yet: open a checkpoint first.")
            return
        dialog = ModelInfoDialog(self.model, self)
        self.info_dialog = dialog  # kept for tests
        dialog.accepted.connect(lambda: self.set_preprocessing(dialog.preprocessing()))
        dialog.open()

    def set_preprocessing(self, preprocessing: dict) -> int:
        """Override the model's preprocessing; the image is analysed again with it."""
        return self.client.submit(
            "model", partial(jobs.set_preprocessing, preprocessing=preprocessing)
        )

    def ask_checkpoint_settings(self, error: UserError) -> None:
        """The weights don't say everything: ask for the missing settings (and show the ones a
        convention would give), each prefilled with timm's value and marked as a guess, then
        open again; those left at the guess stay marked as assumed for that file."""
        path, fields = error.details.get("path"), error.details.get("fields") or {}
        if path is None:
            return
        assumed = error.details.get("assumed") or {}
        message = error.message
        if assumed:  # a bare file: every field a guess (timm's value), said so
            guesses = {k: ASKED_GUESS.get(k, "an example") for k in fields}
            guesses |= {k: CONVENTION_GUESS for k in assumed}
            message = (
                f"{Path(path).name} doesn't say how it computes these. Each is prefilled with "
                "timm's value and marked as a guess until you change it: give the ones it was "
                'trained with. Guesses you keep stay marked "assumed" until Model ▸ '
                "Settings… confirms them."
            )
        else:
            guesses = {}
        dialog = CheckpointSettingsDialog(
            Path(path), {**fields, **assumed}, message, self, guesses=guesses
        )
        self.settings_dialog = dialog  # kept for tests

        def accepted() -> None:
            values = dialog.values()
            self.settings.remember_guesses(path, {k: values[k] for k in dialog.guessed()})
            self.open_checkpoint(path, values)

        dialog.accepted.connect(accepted)
        dialog.open()

    def assumed_settings(self) -> dict:
        """The current model's settings opened on a guess or a convention, not yet confirmed."""
        model = self.model
        if model is None:
            return {}
        remembered = self.settings.guesses_for(model.path) if model.path is not None else {}
        return {**remembered, **model.assumed}

    def confirm_model_settings(self) -> None:
        """Model ▸ Settings…: the settings the model was opened with on a guess, to confirm or
        change; confirmed, they are the user's (kept beside the file) and the marker goes."""
        model = self.model
        if model is None or model.path is None or model.family == "model-code":
            self.notifier.user_error("No checkpoint is open: open one first.")
            return
        assumed = self.assumed_settings()
        if not assumed:
            said = f"{model.name}: every setting came from the file or from you."
            self.notifier.info(said)
            self._job_message = said  # about this model: gone when another opens (DESIGN §6)
            return
        message = (
            f"{model.name} was opened with these settings assumed (the file doesn't say them). "
            "Confirm them, or give the ones it was trained with."
        )
        guesses = {k: "assumed" for k in assumed}
        dialog = CheckpointSettingsDialog(
            model.path, assumed, message, self, guesses=guesses, confirm=True
        )
        self.settings_dialog = dialog  # kept for tests
        path = model.path

        def confirmed() -> None:
            self.settings.remember_guesses(path, {})
            self.open_checkpoint(path, dialog.values())

        dialog.accepted.connect(confirmed)
        dialog.open()

    def _show_assumed(self) -> None:
        assumed = self.assumed_settings()
        shown = ", ".join(f"{k} {json.dumps(v)}" for k, v in assumed.items())
        self.assumed_label.setText(f"assumed: {shown}" if assumed else "")
        self.assumed_label.setToolTip(
            "Settings the file doesn't say, opened on a guess: Model ▸ Settings… confirms or "
            "changes them."
        )
        self.assumed_label.setVisible(bool(assumed))

    def open_trained(self, path: Path) -> None:
        """A checkpoint from the Training tab: show it in the viewer on the current image."""
        self.tabs.setCurrentWidget(self.viewer)
        self.open_checkpoint(path)
        if self._requested_source is None:
            samples = resources.sample_images()
            if samples:
                self.open_image(samples[0])
            else:
                self.notifier.info("Model opened: drop or open an image to see its attention.")

    def compare_trained(self, first: Path, best: Path) -> None:
        """Training tab's "Epoch 1 vs best": epoch 1's checkpoint in the viewer, compared with
        the best one (the engine runs the jobs in order: B opens after A)."""
        self.open_trained(first)
        self.compare_with(best)

    def open_image(self, source: object, label: str | None = None) -> int:
        self._model_for_lone_image()
        if isinstance(source, (str, Path)):
            label = label or Path(source).name
            self.settings.add_recent("images", source)
        self._requested_source, self._requested_label = source, label or "image"
        return self.client.submit(
            "image",
            partial(
                jobs.analyze_image,
                source=source,
                label=self._requested_label,
                gradients=self.viewer.needs_gradients(),
            ),
        )

    def stats_over_folder(self, folder: str | Path) -> bool:
        """Head statistics of the current model over every image of ``folder``, measured on a
        thread of its own (the viewer stays usable); False when it can't start."""
        model = self.model
        if model is None or model.path is None or model.family == "model-code":
            self.notifier.user_error(
                "Statistics over a folder need a model opened from a checkpoint file: open one."
            )
            return False
        if self.folder_stats.is_running():
            self.notifier.user_error("A folder is being measured already: cancel it first.")
            return False
        self.viewer.stats_panel.set_running(Path(folder))
        self.folder_stats.start(
            Path(model.path),
            Path(folder),
            preprocessing=model.preprocessing,
            device=self.device_combo.currentText() or "cpu",
            address=self.viewer.stats_panel.cluster_address(),
            gpus_per_worker=self.viewer.stats_panel.cluster_row.gpus_per_worker(),
        )
        return True

    def _folder_stats_failed(self, message: str) -> None:
        self.viewer.stats_panel.set_idle(f"Not measured: {message}")
        self.notifier.user_error(message)

    def _model_for_lone_image(self) -> None:
        """An image with no model open nor asked for: the model used last, else the shipped one,
        and one line that says which and how to choose another."""
        if self.model is not None or self._model_pending:
            return
        recent = [Path(p) for p in self.settings.recent("checkpoints") if Path(p).exists()]
        if recent:
            path, which = recent[0], "the model used last"
        else:
            path, which = resources.default_model_path(), "the shipped shapes model"
        if path is None:
            return
        self.open_checkpoint(path)
        self.notifier.info(
            f"Analysed with {path.name} ({which}). To use another model, drop its checkpoint on "
            "the window or use File ▸ Open checkpoint…"
        )

    def open_folder(self, folder: str | Path) -> None:
        try:
            images = list_images(folder)
        except ValueError as exc:
            self.notifier.user_error(str(exc))
            return
        if not images:
            self.notifier.user_error(f"{Path(folder).name} holds no images vitviz can read.")
            return
        self.folder_images, self.folder_index = images, 0
        self.open_image(images[0])

    def step_folder(self, delta: int) -> None:
        if not self.folder_images:
            return
        self.folder_index = (self.folder_index + delta) % len(self.folder_images)
        self.open_image(self.folder_images[self.folder_index])

    def open_image_dialog(self) -> None:
        filters = f"{IMAGE_FILTER};;All files (*)"
        path = file_dialogs.open_file(self, self.settings, "images", "Open image", filters)
        if path:
            self.folder_images = []
            self.open_image(path)

    def open_checkpoint_dialog(self) -> None:
        filters = f"{CHECKPOINT_FILTER};;All files (*)"
        path = file_dialogs.open_file(
            self, self.settings, "checkpoints", "Open checkpoint", filters
        )
        if path:
            self.open_checkpoint(path)

    def compare_dialog(self) -> None:
        """File ▸ Compare with…: a second checkpoint beside the current model (DESIGN §5)."""
        filters = f"{CHECKPOINT_FILTER};;All files (*)"
        path = file_dialogs.open_file(
            self, self.settings, "checkpoints", "Compare with checkpoint", filters
        )
        if path:
            self.compare_with(path)

    def compare_with(self, path: str | Path) -> int:
        """Open ``path`` as model B; the compare window shows both once it is open."""
        return self.client.submit("compare", partial(compare_jobs.open_second, path=path))

    def _show_compare(self) -> None:
        if self.compare is None:
            self.compare = CompareWindow(self.client, self)
        v = self.viewer
        self.compare.set_methods(list(v.controls.methods.values()), v.controls.method_name())
        if not self.compare.isVisible():  # opened: a size the screen holds (1366 × 768 too)
            screen = self.screen() or QGuiApplication.primaryScreen()
            free = screen.availableGeometry() if screen is not None else None
            room = None if free is None else (free.width(), free.height())
            self.compare.resize(*fitted_size(COMPARE_SIZE, room))
            if free is not None:
                size = self.compare.size()
                self.compare.move(free.x() + (free.width() - size.width()) // 2,
                                  free.y() + (free.height() - size.height()) // 2)  # fmt: skip
        self.compare.show()
        self.compare.raise_()
        if v.image is not None:
            self.compare.apply_image(v.image)

    def open_model_code_dialog(self) -> None:
        spec = ModelCodeDialog.get_spec(self, self.settings)
        if spec is not None:
            self.open_model_code(spec)

    def open_model_code(self, spec: ModelCodeSpec) -> int:
        self.model_label.setText(f"loading {spec.file.name}…")
        self._model_pending = True
        return self.client.submit("model", partial(jobs.load_model_code, spec=spec))

    def open_folder_dialog(self) -> None:
        folder = file_dialogs.open_folder(self, self.settings, "images", "Open a folder of images")
        if folder:
            self.open_folder(folder)

    def paste(self) -> None:
        data = QApplication.clipboard().mimeData()
        if data is None:
            return
        if data.hasUrls() and any(u.isLocalFile() for u in data.urls()):
            self.open_paths([u.toLocalFile() for u in data.urls() if u.isLocalFile()])
        elif data.hasImage():
            image = QApplication.clipboard().image()
            buffer = QBuffer()
            buffer.open(QIODevice.OpenModeFlag.WriteOnly)
            image.save(buffer, "PNG")
            self.open_image(bytes(QByteArray(buffer.data())), "clipboard")
        else:
            self.notifier.user_error("The clipboard holds no image.")

    def _fill_recent(self) -> None:
        self.recent_menu.clear()
        for kind in ("checkpoints", "images"):
            for path in self.settings.recent(kind):
                act = self.recent_menu.addAction(f"{Path(path).name}  ({kind[:-1]})")
                act.setToolTip(path)
                act.triggered.connect(partial(self.open_paths, [path]))
        if self.recent_menu.isEmpty():
            self.recent_menu.addAction("(nothing yet)").setEnabled(False)

    # -- drag and drop ----------------------------------------------------------------------
    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if event.mimeData().hasUrls() or event.mimeData().hasImage():
            event.acceptProposedAction()
        else:
            event.ignore()

    def dropEvent(self, event: QDropEvent) -> None:
        data = event.mimeData()
        paths = [u.toLocalFile() for u in data.urls() if u.isLocalFile()]
        if paths:
            event.acceptProposedAction()
            self.open_paths(paths)
        elif data.hasImage():
            event.acceptProposedAction()
            self.paste_image_data(data.imageData())
        else:
            event.ignore()

    def paste_image_data(self, image) -> None:
        buffer = QBuffer()
        buffer.open(QIODevice.OpenModeFlag.WriteOnly)
        image.save(buffer, "PNG")
        self.open_image(bytes(QByteArray(buffer.data())), "dropped image")

    # -- device -------------------------------------------------------------------------------
    def set_device(self, device: str) -> None:
        if not device or not self.device_combo.isEnabled():
            return
        self.client.submit("device", partial(jobs.set_device, device=device))

    # -- export -------------------------------------------------------------------------------
    def export_dialog(self, what: str) -> None:
        if self.viewer.image is None:
            self.notifier.user_error("Nothing to export yet: open an image and a checkpoint.")
            return
        stem = Path(self.viewer.image.label).stem
        suffix = {"view": "_map.png", "heads": "_heads.png", "npz": ".npz"}[what]
        filt = "NumPy archive (*.npz)" if what == "npz" else "PNG image (*.png)"
        path = file_dialogs.save_file(self, self.settings, "export", "Export", stem + suffix, filt)
        if path:
            self.export_to(path, what)

    def export_to(self, path: str | Path, what: str) -> int:
        """Export the view ('view'), the head grid ('heads') or the numbers ('npz') to path."""
        return self.client.submit(
            "export", partial(jobs.export, path=path, what=what, **self.viewer.export_request())
        )

    def refresh_methods(self) -> int:
        """Read the method table again (at start and after each model: a method registered
        since shows up in the list)."""
        return self.client.submit("methods", lambda state: jobs.method_table())

    # -- results ------------------------------------------------------------------------------
    def _on_result(self, channel: str, result: object) -> None:
        match result:
            case ModelSummary():
                self._apply_model(result, channel)
            case ImageResult():
                self._apply_image(result)
            case MapsResult():
                self.viewer.apply_maps(result)
            case str() if channel == "compare":
                self._show_compare()
            case CompareResult():
                if self.compare is not None:
                    self.compare.apply_compare(result)
            case FeaturesResult():
                self.features.apply_features(result)
            case FaithfulnessResult():
                self.viewer.apply_faithfulness(result)
            case list() if channel == "warmup":
                self.devices = [str(d) for d in result]
                self._fill_devices()
            case list() if channel == "methods":
                self.viewer.set_methods(result)
            case list() if channel == "cache":
                self._show_cache(result)
            case Path() if channel == "export":
                self.notifier.info(
                    f"Saved {result.name} in {result.parent}", link=("Open folder", result.parent)
                )
            case str() if channel == "device":
                self.device_label.setText(f"device: {result}")
                if self._shown_source is not None:
                    self.open_image(self._shown_source, self._shown_label)

    def _show_cache(self, entries: list) -> None:
        dialog = CacheDialog(entries, self)
        self.cache_dialog = dialog  # kept for tests
        dialog.accepted.connect(lambda: self._open_cached(dialog))
        dialog.open()

    def _open_cached(self, dialog: CacheDialog) -> None:
        path = dialog.selected_path()
        if path is not None:
            self.open_checkpoint(path)

    def _fill_devices(self) -> None:
        saved = self.settings.get("device", "cpu", str)
        self.device_combo.blockSignals(True)
        self.device_combo.clear()
        self.device_combo.addItems(self.devices)
        self.device_combo.setCurrentText(saved if saved in self.devices else "cpu")
        self.device_combo.setEnabled(len(self.devices) > 1)
        self.device_combo.blockSignals(False)
        self.device_label.setText(f"device: {self.device_combo.currentText()}")
        if self.device_combo.currentText() != "cpu":
            self.client.submit(
                "device", partial(jobs.set_device, device=self.device_combo.currentText())
            )

    def apply_prompts(self, prompts: tuple[str, ...]) -> int:
        """Make typed prompts the model's classes (a kind that takes none says why); the image
        is analysed again when the model's new summary comes."""
        return self.client.submit("prompts", partial(jobs.apply_prompts, prompts=tuple(prompts)))

    def _show_prompts(self, summary: ModelSummary, channel: str) -> None:
        """The prompt box for a model that takes prompts: a model just opened shows its own,
        else those last applied to its checkpoint (applied again), else the hint."""
        self.viewer.show_prompts(summary.takes_prompts, summary.prompts)
        if not summary.takes_prompts:
            return
        box, path = self.viewer.prompt_box, summary.path
        if summary.prompts and path is not None:
            self.settings.remember_prompts(path, summary.prompts)
        if channel != "model" or (summary.prompts and box.prompts() == summary.prompts):
            return  # applied from the box, or the same model again: it keeps what was typed
        remembered = () if path is None else self.settings.prompts_for(path)
        shown = summary.prompts or remembered
        box.set_text(shown)
        if not summary.prompts and remembered:
            self.apply_prompts(remembered)

    def _apply_model(self, summary: ModelSummary, channel: str = "model") -> None:
        opened = self._model_pending or self.model is None or summary.path != self.model.path
        if opened and self._job_message and self.message_bar.text() == self._job_message:
            self.message_bar.hide()  # a refusal about the model before this one (DESIGN §6)
        self.model = summary
        self._model_pending = False
        self.model_label.setText(model_line(summary))
        self._show_assumed()
        self.device_label.setText(f"device: {summary.device}")
        if summary.path is not None and summary.family != "model-code":
            self.settings.add_recent("checkpoints", summary.path)
        self.setWindowTitle(f"vitviz — {model_words(summary)}")
        self.viewer.target_class = None
        self.refresh_methods()
        self._show_prompts(summary, channel)  # remembered prompts go before the image
        source = self._requested_source
        if source is not None:
            self.open_image(source, self._requested_label)

    def _apply_image(self, result: ImageResult) -> None:
        self._shown_source, self._shown_label = self._requested_source, result.label
        self.viewer.apply_image(result)
        self.features.apply_image(result)
        if self.compare is not None and self.compare.isVisible():
            self.compare.apply_image(result)
        self.device_label.setText(f"device: {result.device}")
        secs = result.seconds
        took = f"{secs:.2f} s" if secs >= 1 else f"{secs * 1e3:.0f} ms"
        self.hover_label.setText(f"{result.label}: analysed in {took}")

    def _on_user_error(self, channel: str, error: UserError) -> None:
        if channel == "image" and error.kind != "checkpoint":
            self._requested_source = self._shown_source  # forget the bad one
            self._requested_label = self._shown_label
        # kind "checkpoint": no model yet; keep the image, _apply_model opens it with the model
        if channel == "maps" and error.kind == "no_image":
            return  # a new model's re-analysis is under way; its maps are asked for on arrival
        if channel == "compare" and self.compare is not None:
            self.compare.failed(error.message)
        if channel == "features":  # said in the Features tab, not over every image
            self.features.failed(error.message)
            return
        if channel == "faithfulness":
            self.viewer.faithfulness_failed(error.message)
        if channel == "model":
            self._model_pending = False
            # the model still on screen, said as when it opened (its shape too)
            self.model_label.setText("no model" if self.model is None else model_line(self.model))
        self.notifier.user_error(error.message)
        self._job_message = error.message
        if error.kind == "settings":
            self.ask_checkpoint_settings(error)

    def _on_failed(self, channel: str, details: str) -> None:
        last = details.strip().splitlines()[-1] if details.strip() else "unknown error"
        self.notifier.bug(f"An unexpected error stopped the {channel} job: {last}", details)

    def _on_busy(self, busy: bool) -> None:
        if busy:
            self._busy_timer.start()
        else:
            self._busy_timer.stop()
            self.progress.hide()
            self.progress.setRange(0, 0)
            self.passes_cancel.hide()

    def _on_passes(self, channel: str, done: int, total: int) -> None:
        """A long method's forward passes (Score-CAM, Ablation-CAM): counted, with Cancel."""
        self._passes_channel = channel
        self.progress.setRange(0, max(1, total))
        self.progress.setValue(done)
        self.progress.setFormat("%v/%m passes")
        self.progress.show()
        self.passes_cancel.setVisible(done < total)

    def _cancel_passes(self) -> None:
        if self._passes_channel:
            self.client.cancel(self._passes_channel)
        self.passes_cancel.hide()
        self.progress.setRange(0, 0)

    def show_families(self) -> FamiliesDialog:
        """Help ▸ Supported checkpoints: the families table, modeless."""
        from vitviz.checkpoints.families.catalogue import family_rows

        dialog = FamiliesDialog(family_rows(), self)
        dialog.show()
        return dialog

    def about(self) -> None:
        QMessageBox.about(
            self,
            "About vitviz",
            f"<b>vitviz {__version__}</b><p>Look inside Vision Transformers: "
            "attention of every layer and head, rollout and relevance over your "
            "images.</p><p>Drop an image and a checkpoint on the window.</p>",
        )

    # -- test helpers -------------------------------------------------------------------------
    def map_result(self) -> MapsResult | None:
        return self.viewer.maps


def dispose(window: MainWindow) -> None:
    """Close ``window`` and destroy it and every widget and plot item in it now, while Python
    is whole. Left to the interpreter's exit, PySide tears the scene graph down with Python half
    finalised: a resize sent to a plot item then ran its Python override and the process died
    (SIGSEGV after a clean run)."""
    window.close()
    shiboken6.delete(window)
