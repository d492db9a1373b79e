"""The prompt box: what a model whose classes are typed prompts (a CLIP) should look for.

One prompt per line. Enter starts the next line and applies the prompts typed so far; the
button applies them too. The box shows only for a model that takes prompts (the engine's
``ModelSummary.takes_prompts``); the window never asks which kind the model is."""

from __future__ import annotations

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

HINT = "type what to look for, one per line"
TITLE = "<b>Prompts</b> · {scored} · Enter applies them"


def parse_prompts(text: str) -> tuple[str, ...]:
    """The prompts of ``text``: its lines, stripped, blank ones dropped, each once."""
    return tuple(dict.fromkeys(line.strip() for line in text.splitlines() if line.strip()))


# the keys that move the cursor: in the box they are the box's, not the window's shortcuts
# (arrows step the head and layer, Page Up / Down the layer); Alt+arrows stay the window's
CURSOR_KEYS = frozenset(
    {Qt.Key.Key_Left, Qt.Key.Key_Right, Qt.Key.Key_Up, Qt.Key.Key_Down, Qt.Key.Key_PageUp,
     Qt.Key.Key_PageDown, Qt.Key.Key_Home, Qt.Key.Key_End}
)  # fmt: skip


class PromptEdit(QPlainTextEdit):
    """A plain text box whose Enter also asks for the lines to be applied."""

    enterPressed = Signal()

    def event(self, event: QEvent) -> bool:
        if (
            event.type() == QEvent.Type.ShortcutOverride
            and isinstance(event, QKeyEvent)
            and event.key() in CURSOR_KEYS
            and not event.modifiers() & Qt.KeyboardModifier.AltModifier
        ):
            event.accept()  # the key comes to the box as a key press
            return True
        return super().event(event)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        super().keyPressEvent(event)  # the new line, where the next prompt is typed
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            self.enterPressed.emit()


MIN_LINES, MAX_LINES = 5, 12  # the prompts the box shows at least, and at most before scrolling


class PromptBox(QWidget):
    """Typed prompts -> ``applyRequested(tuple[str, ...])``."""

    applyRequested = Signal(tuple)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.applied: tuple[str, ...] = ()  # the prompts the model scores now
        self.title = QLabel(TITLE.format(scored="none yet"))
        self.title.setWordWrap(True)  # beside the button in a narrow panel: two lines, not cut
        self.edit = PromptEdit()
        self.edit.setPlaceholderText(HINT)
        self.edit.setTabChangesFocus(True)
        self.edit.setToolTip(
            "Each line is a prompt the image is scored against (softmax over the prompts). "
            "Enter or Apply prompts scores them; click a bar to explain that prompt."
        )
        self._fit_lines()
        self.edit.textChanged.connect(self._fit_lines)
        self.apply_button = QPushButton("Apply prompts")
        self.apply_button.setToolTip("Score the image against the prompts typed above")
        top = QHBoxLayout()  # the title and the button on one row: the panel stays short
        top.setContentsMargins(0, 0, 0, 0)
        top.addWidget(self.title, 1)
        top.addWidget(self.apply_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 4, 0, 2)
        layout.setSpacing(3)
        layout.addLayout(top)
        layout.addWidget(self.edit)
        self.edit.enterPressed.connect(self._on_enter)
        self.apply_button.clicked.connect(self.apply)

    def _fit_lines(self) -> None:
        """Five lines show at least; the box grows with its lines up to MAX_LINES (more
        scroll)."""
        lines = self.edit.document().blockCount() + 1  # room for the next prompt
        shown = min(MAX_LINES, max(MIN_LINES, lines))
        height = shown * self.edit.fontMetrics().lineSpacing() + 12
        if self.edit.height() != height or self.edit.minimumHeight() != height:
            self.edit.setFixedHeight(height)

    def prompts(self) -> tuple[str, ...]:
        return parse_prompts(self.edit.toPlainText())

    def set_text(self, prompts: tuple[str, ...]) -> None:
        """Show ``prompts`` in the box, one per line (none: the hint)."""
        self.edit.setPlainText("\n".join(prompts))

    def set_applied(self, prompts: tuple[str, ...]) -> None:
        """The prompts the model scores now: the title says how many."""
        self.applied = tuple(prompts)
        n = len(self.applied)
        self.title.setText(TITLE.format(scored="none yet" if n == 0 else f"{n} scored"))

    def apply(self) -> None:
        self.applyRequested.emit(self.prompts())

    def _on_enter(self) -> None:
        prompts = self.prompts()
        if prompts and prompts == self.applied:
            return  # a new empty line: nothing to score again
        self.applyRequested.emit(prompts)
