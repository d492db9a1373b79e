"""`vitviz-cli info` prints provenance as indented lines (vitviz.core.tree_text), not one JSON
line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import random_vit

from vitviz.checkpoints import save_checkpoint
from vitviz.cli import main
from vitviz.core.tree_text import MAX_DEPTH, MAX_ITEMS, scalar_text, tree_lines


def test_nested_objects_are_indented_and_values_aligned() -> None:
    data = {
        "epoch": 53,
        "dataset": {"kind": "shapes", "fresh_each_epoch": True},
        "lr": 7.833508585080615e-05,
        "mean": [0.5, 0.25],
        "runs": [{"seed": 0}],
        "name": "",
        "seed": None,
    }
    assert tree_lines(data) == [
        "epoch:   53",
        "dataset:",
        "  kind:             shapes",
        "  fresh_each_epoch: true",
        "lr:      7.83351e-05",
        "mean:    [0.5, 0.25]",
        "runs:",
        "  [0]:",
        "    seed: 0",
        'name:    ""',
        "seed:    none",
    ]


def test_scalars_stay_readable_and_printable() -> None:
    assert scalar_text(4.0) == "4.0" and scalar_text(1525.8101279) == "1525.81"
    assert scalar_text(float("nan")) == "nan" and scalar_text(False) == "false"
    assert scalar_text("two\nlines\x1b[2J") == "two\\nlines\\x1b[2J"


def test_deep_and_long_data_are_cut() -> None:
    deep: dict = {}
    inner = deep
    for _ in range(5000):  # deeper than Python's recursion limit: never walked that far
        inner["next"] = {}
        inner = inner["next"]
    lines = tree_lines(deep)
    assert len(lines) == MAX_DEPTH and lines[-1].strip() == "next: {…}"
    wide = {f"k{i}": i for i in range(MAX_ITEMS + 7)}
    assert tree_lines(wide)[-1] == "… (7 more)"
    assert tree_lines({"xs": list(range(MAX_ITEMS + 3))})[0].endswith(", … (3 more)]")


def test_info_prints_provenance_as_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    provenance = {"trained_by": "vitviz.training", "metrics": {"val_acc": 0.988, "step": 8321}}
    path = save_checkpoint(random_vit(), tmp_path / "m.safetensors", provenance=provenance)
    assert main(["info", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    block = lines[lines.index("provenance:") + 1 :]  # save_checkpoint adds version and date
    own = [line for line in block if line.split()[0] in ("trained_by:", "metrics:")]
    assert [line.split() for line in own] == [["trained_by:", "vitviz.training"], ["metrics:"]]
    assert own[0].startswith("  trained_by:") and own[1] == "  metrics:"
    after = block[block.index("  metrics:") + 1 :][:2]
    assert [line.split() for line in after] == [["val_acc:", "0.988"], ["step:", "8321"]]
    assert all(line.startswith("    ") and not line.startswith("     ") for line in after)
    assert not any("{" in line for line in lines)
    assert main(["info", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["provenance"].items() >= provenance.items()
