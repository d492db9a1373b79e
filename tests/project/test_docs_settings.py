"""docs/settings.md's vocabulary is the code's: every key the bare-file questions name, and
every training-checkpoint entry read, is a row of its tables (and each row names a test file
that exists)."""

from __future__ import annotations

import re
from pathlib import Path

from vitviz.checkpoints.training_args import SETTINGS_KEYS, YAML_NAME
from vitviz.kinds.vit.families.timm_settings import HOW

DOC = Path(__file__).resolve().parents[2] / "docs" / "settings.md"


def _rows() -> list[str]:
    return [line for line in DOC.read_text(encoding="utf-8").splitlines() if line.startswith("| `")]


def test_every_asked_setting_and_training_entry_is_a_row() -> None:
    first_cells = " ".join(row.split("|")[1] for row in _rows())
    for key in HOW:
        assert f'`"{key}"`' in first_cells, key
    assert "`--heads N`" in first_cells and "`--arch NAME`" in first_cells
    for key in (*SETTINGS_KEYS, "arch"):
        assert f'`"{key}"`' in first_cells, key
    assert f"`{YAML_NAME}`" in first_cells


def test_each_row_names_a_test_that_exists() -> None:
    tests = Path(__file__).resolve().parents[1]
    for row in _rows():
        named = re.findall(r"`(test_\w+\.py)`", row)
        assert named, row
        assert all(any(tests.rglob(n)) for n in named), row
