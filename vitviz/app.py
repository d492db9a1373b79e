"""vitviz (the gui-script): open the window first, then load torch and the model behind it.

Two hooks for smoke tests and ``benchmarks/startup.py``, off unless asked for:

- ``--quit-after-ms N`` closes the window (as the user would) N ms after the work asked for at
  start is done and on screen: the files given are shown, or have failed with a message.
- ``VITVIZ_TIMING=1`` prints ``first-paint <s> (...)`` once the window has painted and
  ``first-prediction <s> (...)`` once the predictions of the first image have painted (the
  parenthesis says whether torch was imported by then), in seconds since
  ``VITVIZ_TIMING_T0`` (a ``time.time()`` value the spawning process sets just before it starts
  this one), or since this module was imported when that is not set.
"""

from __future__ import annotations

import time

_T0 = time.time()  # before anything heavy is imported

import argparse  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from typing import Any  # noqa: E402


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="vitviz", description="Look inside Vision Transformers.")
    parser.add_argument(
        "files",
        nargs="*",
        help="images, checkpoints or folders to open, or a Hugging Face model id "
        "(org/name, downloaded into the hub cache when it isn't there)",
    )
    parser.add_argument(
        "--quit-after-ms",
        type=int,
        default=None,
        metavar="N",
        help="close the window N ms after the files given are shown (for smoke tests)",
    )
    parser.add_argument(
        "--self-test",
        action="store_true",
        help="load the shipped model, analyse the samples offscreen, check; exit 0 or 1",
    )
    return parser.parse_args(argv)


def given_files(files: Sequence[str]) -> list[str]:
    """The command line's files as absolute paths; a Hugging Face model id (``org/name``,
    ``org/name@revision``) that is not a path here stays an id."""
    from vitviz.core.model_ids import parse_model_ref

    return [
        f if not os.path.exists(f) and parse_model_ref(f) else os.path.abspath(f) for f in files
    ]


def main(argv: Sequence[str] | None = None) -> int:
    import multiprocessing

    multiprocessing.freeze_support()  # a frozen bundle's spawned training child stops here
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.self_test:
        from vitviz.selftest import run

        return run()
    from vitviz.qt_deps import startup_check

    advice = startup_check()  # no display, a missing xcb library: say so, don't let Qt abort
    if advice is not None:
        print(advice.text, file=sys.stderr, flush=True)
        if advice.fatal:
            return advice.exit_code
    os.environ.setdefault("QT_ENABLE_HIGHDPI_SCALING", "1")
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QGuiApplication
    from PySide6.QtWidgets import QApplication

    QGuiApplication.setHighDpiScaleFactorRoundingPolicy(
        Qt.HighDpiScaleFactorRoundingPolicy.PassThrough
    )
    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("vitviz")
    app.setOrganizationName("vitviz")
    _set_icon(app)
    import pyqtgraph as pg

    pg.setConfigOptions(imageAxisOrder="row-major", antialias=True)
    from pyqtgraph.util.garbage_collector import GarbageCollector

    # Cyclic garbage is collected on a GUI-thread timer only: a Qt object whose wrapper the
    # collector frees on the engine thread runs its C++ destructor there and can deadlock
    # against the GUI thread (a Qt mutex against the GIL).
    collector = GarbageCollector(interval=1.0)  # noqa: F841 - lives as long as the app runs
    from vitviz.ui.main_window import MainWindow, dispose

    window = MainWindow()
    window.notifier.install_excepthook()
    if os.environ.get("VITVIZ_TIMING"):
        _install_timing(window)
    window.show()

    files = given_files(args.files)
    _after_first_paint(window, lambda: window.start(files, defaults=not files))
    if args.quit_after_ms is not None:
        _quit_when_idle(window, max(0, args.quit_after_ms))
    code = app.exec()
    dispose(window)
    return code


def _after_first_paint(window: Any, start: Any, fallback_ms: int = 1000) -> None:
    """Call ``start`` once the window has painted (so torch's import can't delay the first paint;
    DESIGN §2.6), or after ``fallback_ms`` if no paint comes (e.g. started minimised)."""
    from PySide6.QtCore import QEvent, QObject, QTimer

    class FirstPaint(QObject):
        done = False

        def fire(self) -> None:
            if not self.done:
                self.done = True
                window.removeEventFilter(self)
                start()

        def eventFilter(self, obj: Any, event: Any) -> bool:  # noqa: N802 (Qt's name)
            if not self.done and event.type() == QEvent.Type.Paint:
                QTimer.singleShot(0, self.fire)  # after this paint has reached the screen
            return False

    watch = FirstPaint(window)
    window.installEventFilter(watch)
    QTimer.singleShot(fallback_ms, watch.fire)


def _quit_when_idle(window: Any, delay_ms: int) -> None:
    """Close ``window`` ``delay_ms`` after the engine first goes idle with nothing left to apply."""
    from PySide6.QtCore import QTimer

    def check() -> None:  # a result applied after going idle may have asked for more work
        if not window.client.is_busy():
            window.client.busyChanged.disconnect(on_busy)
            QTimer.singleShot(delay_ms, window.close)

    def on_busy(busy: bool) -> None:
        if not busy:
            QTimer.singleShot(0, check)

    window.client.busyChanged.connect(on_busy)


def _install_timing(window: Any) -> None:
    """Print ``first-paint`` and ``first-prediction`` (see the module docstring) to stdout."""
    from PySide6.QtCore import QEvent, QObject, QTimer

    try:
        t0 = float(os.environ.get("VITVIZ_TIMING_T0", ""))
    except ValueError:
        t0 = _T0

    def report(what: str, torch_loaded: bool) -> None:
        torch = "torch loaded" if torch_loaded else "torch not loaded"
        print(f"{what} {time.time() - t0:.4f} ({torch})", flush=True)

    class PaintWatch(QObject):
        """Reports ``what`` once, just after the first paint of ``target`` (when armed)."""

        def __init__(self, target: Any, what: str, armed: bool) -> None:
            super().__init__(window)
            self.target, self.what, self.armed, self.done = target, what, armed, False
            target.installEventFilter(self)

        def eventFilter(self, obj: Any, event: Any) -> bool:  # noqa: N802 (Qt's name)
            if self.armed and obj is self.target and event.type() == QEvent.Type.Paint:
                self.armed, self.done = False, True
                self.target.removeEventFilter(self)
                loaded = "torch" in sys.modules  # as the paint starts
                QTimer.singleShot(0, lambda: report(self.what, loaded))  # after the paint
            return False

    window._paint_watch = PaintWatch(window, "first-paint", armed=True)
    chart = window.viewer.predictions.viewport()
    window._prediction_watch = watch = PaintWatch(chart, "first-prediction", armed=False)

    def on_result(channel: str, _result: object) -> None:
        if channel == "image" and not watch.done:
            watch.armed = True
            chart.update()

    window.client.resultReady.connect(on_result)


def _set_icon(app: Any) -> None:
    """The window icon from the shipped resources (no icon if they are missing)."""
    from PySide6.QtGui import QIcon

    from vitviz.core import resources

    try:
        icon = QIcon()
        for size in (16, 24, 32, 48, 64, 128, 256):
            icon.addFile(str(resources.icon_path(size)))
        app.setWindowIcon(icon)
    except FileNotFoundError:
        pass


if __name__ == "__main__":
    sys.exit(main())
