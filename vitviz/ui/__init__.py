"""The window: PySide6 + pyqtgraph. Widgets ask the engine (vitviz.workers) for all compute."""
