"""The one error path: short messages for expected mistakes, a details dialog for bugs."""

from __future__ import annotations

import html
import sys
import traceback
from pathlib import Path
from types import TracebackType

from PySide6.QtCore import QObject, Qt, QTimer, QUrl, Signal
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import QHBoxLayout, QLabel, QMessageBox, QToolButton, QWidget


class MessageBar(QWidget):
    """A strip at the top of the window with the last short message; closes itself."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("messageBar")
        self.label = QLabel()
        self.label.setWordWrap(True)
        self.label.setTextFormat(Qt.TextFormat.RichText)  # messages are escaped; links are ours
        self.label.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextSelectableByMouse
            | Qt.TextInteractionFlag.LinksAccessibleByMouse
        )
        self.label.linkActivated.connect(self._open_link)
        self.plain = ""  # the message as text
        self.links: dict[str, Path] = {}  # anchor -> folder it opens
        close = QToolButton()
        close.setText("✕")
        close.setAutoRaise(True)
        close.clicked.connect(self.hide)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(8, 4, 4, 4)
        layout.addWidget(self.label, 1)
        layout.addWidget(close)
        self._timer = QTimer(self, singleShot=True, interval=15000)
        self._timer.timeout.connect(self.hide)
        self.hide()

    def show_message(
        self, text: str, level: str = "error", link: tuple[str, Path] | None = None
    ) -> None:
        """Show ``text``; ``link`` = (words, folder) adds a link that opens that folder."""
        colours = {"error": "#fde2e1", "info": "#e3f0ff"}
        self.setStyleSheet(
            f"#messageBar {{ background: {colours.get(level, '#eee')}; "
            "border-bottom: 1px solid #bbb; } QLabel { color: #222; }"
        )
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        self.plain = text
        self.links = {}
        shown = html.escape(text)
        if link is not None:
            self.links["folder"] = link[1]
            shown += f' · <a href="folder">{html.escape(link[0])}</a>'
        self.label.setText(shown)
        self.show()
        self._timer.start()

    def text(self) -> str:
        return self.plain if self.isVisible() else ""

    def _open_link(self, anchor: str) -> None:
        folder = self.links.get(anchor)
        if folder is not None:  # a folder vitviz wrote to, opened because the user asked
            QDesktopServices.openUrl(QUrl.fromLocalFile(str(folder)))


class ErrorNotifier(QObject):
    """Where every error ends up; unexpected ones open one dialog with the traceback."""

    userMessage = Signal(str)
    bugReported = Signal(str, str)  # summary, details

    def __init__(self, bar: MessageBar, parent_widget: QWidget) -> None:
        super().__init__(parent_widget)
        self._bar = bar
        self._parent = parent_widget
        self._dialog: QMessageBox | None = None
        self.last_details = ""

    def user_error(self, message: str) -> None:
        self._bar.show_message(message, "error")
        self.userMessage.emit(message)

    def info(self, message: str, link: tuple[str, Path] | None = None) -> None:
        self._bar.show_message(message, "info", link)

    def bug(self, summary: str, details: str) -> None:
        """Show (or update) the single error dialog; never blocks the caller."""
        self.last_details = details
        self.bugReported.emit(summary, details)
        if self._dialog is None:
            box = QMessageBox(self._parent)
            box.setIcon(QMessageBox.Icon.Critical)
            box.setWindowTitle("vitviz: something went wrong")
            box.setWindowModality(Qt.WindowModality.NonModal)
            self._dialog = box
        self._dialog.setText(
            f"{summary}\n\nThe window keeps working. The details below help to report the problem."
        )
        self._dialog.setDetailedText(details)
        self._dialog.show()

    @property
    def dialog(self) -> QMessageBox | None:
        return self._dialog

    def install_excepthook(self) -> None:
        """Uncaught exceptions (in Qt slots too) reach ``bug`` instead of killing the app."""

        def hook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
            if issubclass(kind, KeyboardInterrupt):
                sys.__excepthook__(kind, value, tb)
                return
            details = "".join(traceback.format_exception(kind, value, tb))
            sys.stderr.write(details)
            self.bug(f"{kind.__name__}: {value}", details)

        sys.excepthook = hook
