"""`vitviz-cli faithfulness`: the JSON is `report` of
`evaluate_methods` on the same inputs, the CSV holds the same numbers, the PNG is drawn, and
masks are found beside the images or in --masks DIR."""

from __future__ import annotations

import csv
import json
from functools import partial
from pathlib import Path

import numpy as np
import pytest
from cli_checks import one_line_error
from conftest import CLASS_NAMES, random_vit
from faithfulness_cli_helpers import OUTPUTS, copy_samples, run_faithfulness
from PIL import Image

from vitviz.checkpoints import load_checkpoint, save_checkpoint
from vitviz.cli import main
from vitviz.explain import all_methods
from vitviz.explain.faithfulness import evaluate_methods, report
from vitviz.explain.localisation import mask_grid_for
from vitviz.imaging.curves import GREY, PALETTE
from vitviz.pipeline.analysis import analyze

METHODS = ("rollout", "relevance", "gradcam", "random")
STEPS = 4


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny 64-px ViT (8 × 8 patches, like the shipped model) with five classes."""
    folder = tmp_path_factory.mktemp("model")
    model = random_vit(3, image_size=64)
    return save_checkpoint(model, folder / "tiny64.safetensors", class_names=CLASS_NAMES)


@pytest.fixture
def samples(tmp_path: Path) -> list[Path]:
    """Two shipped sample scenes with their masks beside them."""
    return copy_samples(tmp_path)


_faithfulness = partial(run_faithfulness, STEPS)


def _reference(ckpt: Path, images: list[Path], masks: Path | None = None) -> dict:
    """report(evaluate_methods(...)) on the same images, as JSON."""
    loaded = load_checkpoint(ckpt)
    results = []
    for path in images:
        a = analyze(loaded, path, gradients=True)
        mask = mask_grid_for(path, a.geometry, masks)
        results.append(evaluate_methods(a, METHODS, steps=STEPS, mask=mask, name=str(path)))
    return json.loads(json.dumps(report(results)))


def test_json_csv_and_png_are_the_measured_numbers(
    tmp_path: Path, ckpt: Path, samples: list[Path], capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "out"
    assert _faithfulness(ckpt, samples, out, "--method", *METHODS) == 0
    captured = capsys.readouterr()
    assert sorted(p.name for p in out.iterdir()) == OUTPUTS
    doc = json.loads((out / "faithfulness.json").read_text())
    ref = _reference(ckpt, samples)
    # the schema, exactly
    assert set(doc) == {"steps", "images", "summary"} and doc["steps"] == STEPS
    assert [im["image"] for im in doc["images"]] == [str(p) for p in samples]
    for got, want in zip(doc["images"], ref["images"], strict=True):
        assert set(got) == {"image", "target_class", "methods"}
        assert got["target_class"] == want["target_class"]
        assert list(got["methods"]) == list(METHODS)
        for name in METHODS:
            g, w = got["methods"][name], want["methods"][name]
            assert set(g) == {
                "deletion",
                "insertion",
                "deletion_auc",
                "insertion_auc",
                "mass_in_mask",
                "pointing_game",
            }
            assert len(g["deletion"]) == len(g["insertion"]) == STEPS + 1
            for key in ("deletion", "insertion"):
                np.testing.assert_allclose(g[key], w[key], atol=1e-9, rtol=0)
            for key in ("deletion_auc", "insertion_auc", "mass_in_mask"):
                assert g[key] == pytest.approx(w[key], abs=1e-9)
            assert g["pointing_game"] is w["pointing_game"]
    for name in METHODS:
        s, w = doc["summary"][name], ref["summary"][name]
        assert (
            set(s)
            == set(w)
            == {
                "deletion_auc",
                "insertion_auc",
                "images",
                "mass_in_mask",
                "pointing_game",
                "masked_images",
            }
        )
        assert s == pytest.approx(w, abs=1e-9) and s["images"] == s["masked_images"] == 2
    # the masks were found and cover part of the 8 × 8 grid
    loaded = load_checkpoint(ckpt)
    for path in samples:
        mask = mask_grid_for(path, analyze(loaded, path).geometry)
        assert mask is not None and 0 < mask.sum() < 64

    # the CSV: one row per image × method with the JSON's numbers
    with open(out / "faithfulness.csv", newline="") as f:
        rows = list(csv.reader(f))
    head = ["image", "target_class", "method", "deletion_auc", "insertion_auc"]
    head += ["mass_in_mask", "pointing_game"]
    head += [f"deletion_{k}" for k in range(STEPS + 1)]
    head += [f"insertion_{k}" for k in range(STEPS + 1)]
    assert rows[0] == head
    assert len(rows) == 1 + len(samples) * len(METHODS)
    for row in rows[1:]:
        entry = next(im for im in doc["images"] if im["image"] == row[0])
        m = entry["methods"][row[2]]
        assert int(row[1]) == entry["target_class"]
        assert float(row[3]) == m["deletion_auc"] and float(row[5]) == m["mass_in_mask"]
        assert row[6] == str(int(m["pointing_game"]))
        assert [float(v) for v in row[7 : 8 + STEPS]] == m["deletion"]
        assert [float(v) for v in row[8 + STEPS :]] == m["insertion"]

    # the PNG: a chart of a sane size with a line in each method's colour
    with Image.open(out / "faithfulness.png") as im:
        assert im.format == "PNG"
        w, h = im.size
        pixels = np.asarray(im.convert("RGB")).astype(int)
    assert 700 <= w <= 2500 and 250 <= h <= 1200
    for colour in (*PALETTE[:3], GREY):
        near = (np.abs(pixels - np.array(colour)).sum(axis=-1) < 40).sum()
        assert near > 100, colour
    assert (np.abs(pixels - np.array(PALETTE[3])).sum(axis=-1) < 40).sum() < 20  # 3 hues only

    # stdout: the summary table; stderr: one progress line per image and the files
    for name in METHODS:
        assert f"| `{name}` | {doc['summary'][name]['deletion_auc']:.3f} |" in captured.out
    assert "[1/2] star.png:" in captured.err and "[2/2] ring.png:" in captured.err
    assert "mask star_mask.png" in captured.err and "faithfulness.png" in captured.err


def test_masks_from_a_folder_and_images_without_one(
    tmp_path: Path, ckpt: Path, samples: list[Path], capsys: pytest.CaptureFixture
) -> None:
    masks = tmp_path / "masks"
    masks.mkdir()
    for path in samples:
        (path.parent / f"{path.stem}_mask.png").rename(masks / f"{path.stem}_mask.png")
    bare = tmp_path / "bare"
    assert _faithfulness(ckpt, samples, bare, "--method", *METHODS) == 0
    doc = json.loads((bare / "faithfulness.json").read_text())
    for entry in doc["images"]:
        for m in entry["methods"].values():
            assert "mass_in_mask" not in m and "pointing_game" not in m
    assert set(doc["summary"]["rollout"]) == {"deletion_auc", "insertion_auc", "images"}
    assert "no mask" in capsys.readouterr().err

    out = tmp_path / "out"
    assert _faithfulness(ckpt, samples, out, "--method", *METHODS, "--masks", str(masks)) == 0
    doc = json.loads((out / "faithfulness.json").read_text())
    ref = _reference(ckpt, samples, masks)
    for got, want in zip(doc["images"], ref["images"], strict=True):
        for name in METHODS:
            g, w = got["methods"][name], want["methods"][name]
            assert g["mass_in_mask"] == pytest.approx(w["mass_in_mask"], abs=1e-9)
            assert g["pointing_game"] is w["pointing_game"]
    assert doc["summary"]["random"]["masked_images"] == 2


def test_default_methods_and_masks_among_the_inputs(
    tmp_path: Path, ckpt: Path, samples: list[Path], capsys: pytest.CaptureFixture
) -> None:
    """No --method: every method that applies; `folder/*.png` measures the images only."""
    inputs = sorted(samples[0].parent.glob("*.png"))
    assert len(inputs) == 4
    out = tmp_path / "out"
    assert main(["faithfulness", *map(str, inputs), "--checkpoint", str(ckpt), "--steps", "2",
                 "--out", str(out)]) == 0  # fmt: skip
    doc = json.loads((out / "faithfulness.json").read_text())
    assert list(doc["summary"]) == [m.name for m in all_methods() if m.map_kind == "scalar"]
    assert sorted(Path(im["image"]).name for im in doc["images"]) == ["ring.png", "star.png"]
    assert "2 of the inputs are masks of the others" in capsys.readouterr().err


def test_a_folder_stands_for_its_images_and_their_masks(
    tmp_path: Path, ckpt: Path, samples: list[Path], capsys: pytest.CaptureFixture
) -> None:
    """A folder (as `explain` takes one): its images measured, its `<stem>_mask.png` used as
    their masks, the same JSON as the images listed; a folder without images: one line, exit 2."""
    listed, folder = tmp_path / "listed", tmp_path / "folder"
    assert _faithfulness(ckpt, samples, listed, "--method", "random") == 0
    assert _faithfulness(ckpt, [samples[0].parent], folder, "--method", "random") == 0
    want = json.loads((listed / "faithfulness.json").read_text())
    got = json.loads((folder / "faithfulness.json").read_text())
    assert sorted(got["images"], key=lambda im: im["image"]) == sorted(
        want["images"], key=lambda im: im["image"]
    )
    assert got["summary"]["random"]["masked_images"] == 2
    capsys.readouterr()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _faithfulness(ckpt, [empty], tmp_path / "none", "--method", "random") == 2
    assert "holds no images" in one_line_error(capsys)
    assert not (tmp_path / "none").exists()


def test_bad_images_and_masks_are_skipped_exit_1(
    tmp_path: Path, ckpt: Path, samples: list[Path], capsys: pytest.CaptureFixture
) -> None:
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"not a picture")
    odd = samples[1].parent / "odd.png"
    Image.new("RGB", (64, 64)).save(odd)
    Image.new("L", (64, 20)).save(odd.parent / "odd_mask.png")  # the wrong shape
    out = tmp_path / "out"
    assert _faithfulness(ckpt, [broken, samples[0], odd], out, "--method", "random") == 1
    err = capsys.readouterr().err
    assert "skipped" in err and "broken.png" in err
    assert "odd_mask.png" in err and "a mask must have the image's size" in err
    doc = json.loads((out / "faithfulness.json").read_text())
    assert [Path(im["image"]).name for im in doc["images"]] == ["star.png"]
    assert _faithfulness(ckpt, [broken], tmp_path / "none", "--method", "random") == 2
    assert not (tmp_path / "none" / "faithfulness.json").exists()


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--steps", "0"], ["--steps", "at least 1"]),
        (["--batch-size", "0"], ["--batch-size", "at least 1"]),
        (["--masks", "nowhere"], ["--masks nowhere", "not a folder"]),
        (["--method", "lime"], ["unknown method 'lime'", "accepted: attention"]),
        (["--method", "random", "--param", "rollout.fusion=max"], ["add --method rollout"]),
        (["--param", "dino-masks.threshold=2"], ["threshold must be in 0.05..1.0"]),
    ],
)
def test_bad_options_exit_2_with_one_line(
    tmp_path: Path,
    ckpt: Path,
    samples: list[Path],
    capsys: pytest.CaptureFixture,
    extra: list[str],
    words: list[str],
) -> None:
    out = tmp_path / "out"
    assert _faithfulness(ckpt, samples, out, *extra) == 2
    one_line_error(capsys, *words)
    assert not out.exists()


def test_a_model_without_a_head_is_refused(
    tmp_path: Path, samples: list[Path], capsys: pytest.CaptureFixture
) -> None:
    ckpt = save_checkpoint(
        random_vit(num_classes=0, image_size=64), tmp_path / "nohead.safetensors"
    )
    assert _faithfulness(ckpt, samples, tmp_path / "out", "--method", "random") == 2
    assert "needs a model with a classification head" in one_line_error(capsys)
