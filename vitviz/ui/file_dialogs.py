"""File dialogs that open in the folder used last for their kind of file and show names in full.

Each kind ("images", "checkpoints", "export", "model_code", "datasets", …) remembers its folder in
the settings (``dirs/<kind>``); a kind never used yet starts in the folder used last for any kind,
else the home folder (never the working directory the app happened to start in). Where Qt's own
dialog is used (no native one on the desktop), it opens at a size that fits a detail view, and its
Name column takes the room the other columns leave, so names are not cut.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QFileDialog, QHeaderView, QTreeView, QWidget

from vitviz.ui.settings import AppSettings

LAST = "dirs/last"  # the folder used last, whatever the kind
MIN_SIZE = (900, 540)  # Qt's own dialog: room for the name, size, type and date columns


def start_folder(settings: AppSettings | None, kind: str, fallback: str = "") -> str:
    """Where a dialog for ``kind`` opens: near ``fallback`` (a path typed in a field), else the
    kind's folder, else the folder used last, else the home folder; only folders that exist."""
    remembered = (
        [] if settings is None else [settings.get(k, "", str) for k in (f"dirs/{kind}", LAST)]
    )
    for text in (fallback, *remembered):
        if not text:
            continue
        path = Path(text).expanduser()
        path = path.parent if path.is_file() else path
        if path.is_dir():
            return str(path)
    return str(Path.home())


def remember(settings: AppSettings | None, kind: str, path: str | Path) -> None:
    """Remember the folder of ``path`` (itself when it is one) for ``kind`` and as the last."""
    if settings is None:
        return
    p = Path(path)
    folder = str(p if p.is_dir() else p.parent)
    settings.set(f"dirs/{kind}", folder)
    settings.set(LAST, folder)


def _fit_columns(dialog: QFileDialog) -> None:
    """Qt's own dialog: large enough, and its Name column as wide as the others leave."""
    tree = dialog.findChild(QTreeView)
    if tree is None:  # a native dialog: the desktop lays it out
        return
    dialog.resize(max(dialog.width(), MIN_SIZE[0]), max(dialog.height(), MIN_SIZE[1]))
    header = tree.header()
    header.setStretchLastSection(False)
    header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
    for section in range(1, header.count()):
        header.setSectionResizeMode(section, QHeaderView.ResizeMode.ResizeToContents)


def _run(dialog: QFileDialog, settings: AppSettings | None, kind: str) -> str | None:
    _fit_columns(dialog)
    if not dialog.exec() or not dialog.selectedFiles():
        return None
    chosen = dialog.selectedFiles()[0]
    remember(settings, kind, chosen)
    return chosen


def _dialog(parent: QWidget | None, title: str, folder: str, filters: str = "") -> QFileDialog:
    dialog = QFileDialog(parent, title, folder, filters)
    dialog.setObjectName("vitvizFileDialog")
    return dialog


def open_file(
    parent: QWidget | None,
    settings: AppSettings | None,
    kind: str,
    title: str,
    filters: str,
    fallback: str = "",
) -> str | None:
    """An existing file of ``kind`` chosen by the user, or None."""
    dialog = _dialog(parent, title, start_folder(settings, kind, fallback), filters)
    dialog.setFileMode(QFileDialog.FileMode.ExistingFile)
    dialog.setAcceptMode(QFileDialog.AcceptMode.AcceptOpen)
    return _run(dialog, settings, kind)


def save_file(
    parent: QWidget | None,
    settings: AppSettings | None,
    kind: str,
    title: str,
    name: str,
    filters: str,
) -> str | None:
    """A file name to write ``kind`` to (proposed: ``name`` in the kind's folder), or None."""
    dialog = _dialog(parent, title, start_folder(settings, kind), filters)
    dialog.setAcceptMode(QFileDialog.AcceptMode.AcceptSave)
    dialog.setFileMode(QFileDialog.FileMode.AnyFile)
    dialog.selectFile(name)
    return _run(dialog, settings, kind)


def open_folder(
    parent: QWidget | None,
    settings: AppSettings | None,
    kind: str,
    title: str,
    fallback: str = "",
) -> str | None:
    """An existing folder for ``kind`` chosen by the user, or None."""
    dialog = _dialog(parent, title, start_folder(settings, kind, fallback))
    dialog.setFileMode(QFileDialog.FileMode.Directory)
    dialog.setOption(QFileDialog.Option.ShowDirsOnly, True)
    return _run(dialog, settings, kind)
