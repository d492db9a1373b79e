"""vitviz (the gui-script): open the window first, then load torch and the model behind it."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="vitviz", description="Look inside Vision Transformers.")
    parser.add_argument("files", nargs="*", help="images, checkpoints or folders to open")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
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
    import pyqtgraph as pg

    pg.setConfigOptions(imageAxisOrder="row-major", antialias=True)
    from vitviz.ui.main_window import MainWindow

    window = MainWindow()
    window.notifier.install_excepthook()
    window.show()
    from PySide6.QtCore import QTimer

    QTimer.singleShot(0, lambda: window.start([os.path.abspath(f) for f in args.files]))
    return app.exec()


if __name__ == "__main__":
    sys.exit(main())
