"""The main window a window test works in: a new window with its settings under the test's
``tmp_path``, that fails the test if the bug dialog was shown while it ran. A test module makes
it its ``window`` fixture:

    @pytest.fixture
    def window(qtbot, tmp_path):
        yield from watched_window(qtbot, tmp_path)
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from test_ui_window import new_window

from vitviz.ui.main_window import MainWindow


def watched_window(qtbot, tmp_path: Path) -> Iterator[MainWindow]:
    """A new window (settings under ``tmp_path``); after the test, no bug dialog was shown."""
    w = new_window(qtbot, tmp_path / "settings.ini")
    bugs: list[str] = []
    w.notifier.bugReported.connect(lambda summary, details: bugs.append(details))
    yield w
    assert not bugs, f"the bug dialog was shown: {bugs}"
