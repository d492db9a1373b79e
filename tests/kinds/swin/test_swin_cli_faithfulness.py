"""`vitviz-cli faithfulness` on a Swin: every method a Swin takes is measured
(the JSON is `report` of `evaluate_swin_methods` on the same inputs, the CSV holds its numbers,
the PNG is drawn), the methods that need a ViT are listed with why, and options a Swin can't
take are refused in one line."""

from __future__ import annotations

import csv
import json
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_checks import one_line_error
from faithfulness_cli_helpers import OUTPUTS, copy_samples, run_faithfulness
from swin_helpers import tiny_torchvision_swin

from vitviz.checkpoints import load_checkpoint
from vitviz.explain.faithfulness import report
from vitviz.explain.localisation import mask_grid_for
from vitviz.explain.methods import all_methods
from vitviz.kindapi import get_kind
from vitviz.kinds.swin.analysis import analyze_swin
from vitviz.kinds.swin.faithfulness import evaluate_swin_methods

STEPS = 3
# every scalar map of the table a Swin takes (an RGB map orders no patches), in table order
SWIN_METHODS = [
    m.name
    for m in all_methods()
    if m.missing_on(get_kind("swin")) is None and m.map_kind == "scalar"
]
VIT_ONLY = ["relevance", "dino-masks", "transformer-attribution", "grad-sam", "attention-gradcam"]


@pytest.fixture(scope="module")
def swin_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny torchvision Swin (patch 4, window 4) that reads 48-px inputs (12 × 12 patches)."""
    path = tmp_path_factory.mktemp("swin") / "swin_tiny.pth"
    torch.save(tiny_torchvision_swin(seed=1).state_dict(), path)
    sidecar = path.with_name(path.name + ".vitviz.json")
    sidecar.write_text(json.dumps({"preprocessing": {"image_size": [48, 48]}}))
    return path


@pytest.fixture
def samples(tmp_path: Path) -> list[Path]:
    return copy_samples(tmp_path)


_run = partial(run_faithfulness, STEPS)


def test_every_method_a_swin_takes_is_measured(
    tmp_path: Path, swin_ckpt: Path, samples: list[Path], capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "out"
    assert _run(swin_ckpt, samples, out) == 0  # no --method: every method that applies
    captured = capsys.readouterr()
    assert sorted(p.name for p in out.iterdir()) == OUTPUTS
    doc = json.loads((out / "faithfulness.json").read_text())
    loaded = load_checkpoint(swin_ckpt)
    results = []
    for path in samples:
        a = analyze_swin(loaded, path)
        mask = mask_grid_for(path, a.geometry)
        assert mask is not None and 0 < mask.sum() < 144  # the 12 × 12 first-stage grid
        results.append(
            evaluate_swin_methods(a, loaded, SWIN_METHODS, steps=STEPS, mask=mask, name=str(path))
        )
    ref = json.loads(json.dumps(report(results)))
    assert doc["steps"] == STEPS and list(doc["summary"]) == SWIN_METHODS
    for got, want in zip(doc["images"], ref["images"], strict=True):
        assert got["image"] == want["image"] and got["target_class"] == want["target_class"]
        assert list(got["methods"]) == SWIN_METHODS
        for name in SWIN_METHODS:
            g, w = got["methods"][name], want["methods"][name]
            assert len(g["deletion"]) == STEPS + 1
            for key in ("deletion", "insertion"):
                np.testing.assert_allclose(g[key], w[key], atol=1e-6, rtol=0)
            assert g["mass_in_mask"] == pytest.approx(w["mass_in_mask"], abs=1e-6)
            assert g["pointing_game"] is w["pointing_game"]
    for name in SWIN_METHODS:
        assert doc["summary"][name] == pytest.approx(ref["summary"][name], abs=1e-6)
        assert doc["summary"][name]["masked_images"] == 2
    with open(out / "faithfulness.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert len(rows) == 1 + 2 * len(SWIN_METHODS)
    assert [r[2] for r in rows[1:]] == SWIN_METHODS * 2
    for row in rows[1:]:
        entry = next(im for im in doc["images"] if im["image"] == row[0])
        assert float(row[3]) == entry["methods"][row[2]]["deletion_auc"]
    for name in VIT_ONLY:  # listed with why, once the options were found good
        assert f"vitviz-cli: {name} not measured: " in captured.err
        line = next(x for x in captured.err.splitlines() if f" {name} not measured" in x)
        assert "CLS token" in line
    assert "[2/2] ring.png:" in captured.err and "mask ring_mask.png" in captured.err
    for name in SWIN_METHODS:
        assert f"| `{name}` |" in captured.out


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (
            ["--method", "rollout", "relevance"],
            ["--method relevance", "CLS token", "methods for this model: attention, rollout"],
        ),
        (
            ["--method", "rollout", "--param", "rollout.discard_ratio=0.2"],
            ["rollout.discard_ratio", "no discard step", "fusion"],
        ),
        (["--method", "attention", "--param", "attention.layer=9"], ["attention", "layer"]),
    ],
)
def test_what_a_swin_cannot_take_is_refused_in_one_line(
    tmp_path: Path,
    swin_ckpt: Path,
    samples: list[Path],
    capsys: pytest.CaptureFixture,
    extra: list[str],
    words: list[str],
) -> None:
    out = tmp_path / "out"
    assert _run(swin_ckpt, samples, out, *extra) == 2
    one_line_error(capsys, *words)
    assert not out.exists()
