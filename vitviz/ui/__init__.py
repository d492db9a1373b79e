"""The window: PySide6 + pyqtgraph. Widgets ask the engine (vitviz.workers) for all compute."""

from vitviz.ui.pyside_guard import guard as _guard

_guard()  # before any widget exists: see vitviz.ui.pyside_guard
