"""`vitviz info` of a LeViT: its config derives the patch size (the stem's stride) instead of
holding it, which the info page once read from the config's dict (a KeyError on every LeViT)."""

from __future__ import annotations

from pathlib import Path

import pytest
from levit_helpers import SIZE, save_folder, tiny_timm_levit

from vitviz.cli import main

pytest.importorskip("timm")


def test_info_of_a_levit_folder_names_its_patch_and_size(tmp_path: Path, capsys) -> None:
    folder = save_folder(tiny_timm_levit(seed=2), tmp_path / "levit")
    assert main(["info", str(folder)]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("architecture:"))
    assert f"patch 16, image {SIZE}×{SIZE}" in line, line
