"""The families table: every registered checkpoint family says what it is and
the parts it maps onto, and the CLI, the window's Help ▸ Supported checkpoints and the table of
docs/checkpoints.md all read that one registry."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings

from vitviz.checkpoints.families import all_families
from vitviz.checkpoints.families.base import Family
from vitviz.checkpoints.families.catalogue import _row, families_markdown, family_rows
from vitviz.cli import main
from vitviz.ui.main_window import MainWindow, dispose
from vitviz.ui.settings import AppSettings

CHECKPOINTS_DOC = Path(__file__).resolve().parents[2] / "docs" / "checkpoints.md"


def test_every_family_is_in_the_table_in_the_order_files_are_tried() -> None:
    rows = family_rows()
    assert [r.name for r in rows] == [f.name for f in all_families()]
    for r in rows:
        assert r.info.label and r.info.names and r.info.forms and r.info.parts, r.name
        assert r.kind  # the kind's label ("any" for vitviz's own format)
    kinds = {r.kind for r in rows}
    assert {"Vision Transformer", "Swin Transformer", "CLIP image tower"} <= kinds


def test_a_family_without_its_description_is_named() -> None:
    bare = Family("someones-layout", lambda source: False, lambda source: None)  # type: ignore[arg-type,return-value]
    with pytest.raises(ValueError, match="someones-layout"):
        _row(bare, "Vision Transformer")


def test_the_checkpoints_doc_table_is_the_registrys() -> None:
    block = re.search(
        r"<!-- families table: vitviz-cli families --markdown -->\n(.*?)\n"
        r"<!-- end of families table -->",
        CHECKPOINTS_DOC.read_text(encoding="utf-8"),
        re.S,
    )
    assert block is not None, "docs/checkpoints.md lost its families table"
    assert block.group(1) == families_markdown(family_rows())


def test_cli_lists_the_families(capsys: pytest.CaptureFixture) -> None:
    assert main(["families"]) == 0
    text = capsys.readouterr().out
    for r in family_rows():
        assert f"{r.info.label}  [{r.name}] -> {r.kind}" in text
    assert main(["families", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [d["name"] for d in listed] == [f.name for f in all_families()]
    assert all(isinstance(d["parts"], list) and d["parts"] for d in listed)


def test_help_menu_shows_the_table(qtbot, tmp_path: Path) -> None:
    settings = AppSettings(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    window = MainWindow(settings)
    try:
        help_menu = next(
            a.menu() for a in window.menuBar().actions() if a.text().replace("&", "") == "Help"
        )
        texts = [a.text().replace("&", "") for a in help_menu.actions()]
        assert "Supported checkpoints…" in texts
        dialog = window.show_families()
        rows = family_rows()
        assert dialog.table.rowCount() == len(rows)
        beit = next(i for i, r in enumerate(rows) if r.name == "timm-beit")
        cells = dialog.row_texts(beit)
        assert cells[0] == "timm BEiT, BEiT v2" and cells[1] == "Vision Transformer"
        assert "relative position bias" in cells[4]
        dialog.close()
    finally:
        dispose(window)
