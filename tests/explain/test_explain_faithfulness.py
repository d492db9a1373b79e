"""Deletion / insertion faithfulness and localisation against a mask (DESIGN §5).

The batched implementation is compared with a plain loop written from the definition: one
image at a time, patches blanked or restored pixel block by pixel block, in float64.
"""

from __future__ import annotations

import copy
import csv
import io
import itertools
import json
import math

import numpy as np
import pytest
import torch
from conftest import CLASS_NAMES, random_vit
from faithfulness_reference import ref_auc, ref_curves
from PIL import Image

from vitviz.checkpoints import LoadedModel
from vitviz.explain import faithfulness, localise, mask_to_grid, random_map
from vitviz.explain.faithfulness import (
    auc,
    csv_rows,
    evaluate_methods,
    patch_order,
    report,
    step_counts,
)
from vitviz.explain.localisation import load_mask, mask_grid_for, mask_path_for
from vitviz.imaging import PatchGeometry, Preprocessing
from vitviz.pipeline.analysis import analyze

GRID = (3, 5)


def model64(seed=0, **options):
    return random_vit(seed, image_size=(24, 40), **options).double()


def input64(seed=0):
    return torch.randn(3, 24, 40, generator=torch.Generator().manual_seed(50 + seed)).double()


def sample_maps():
    """A random map, a map with ties and a constant map (the order is then the index order)."""
    g = torch.Generator().manual_seed(1)
    ties = torch.tensor([[0.5, 0.2, 0.5, 0.0, 0.2], [0.2, 0.5, 0.0, 0.0, 0.9], [0.5] * 5])
    return {
        "random": random_map(GRID, 3),
        "ties": ties,
        "flat": torch.zeros(GRID),
        "noise": torch.randn(GRID, generator=g).double(),
    }


# -- the curves -----------------------------------------------------------------------------------


@pytest.mark.parametrize("steps", [20, 4, 1, 7])
def test_curves_equal_the_loop_float64(steps):
    model, x = model64(), input64()
    maps = sample_maps()
    got = faithfulness(model, x, maps, steps=steps, batch_size=16, name="img.png")
    assert got.image == "img.png" and got.steps == steps
    for name, values in maps.items():
        target, deletion, insertion = ref_curves(model, x, values, steps)
        c = got.methods[name]
        assert got.target_class == target
        assert len(c.deletion) == len(c.insertion) == steps + 1
        assert np.allclose(c.deletion, deletion, atol=1e-12, rtol=0)
        assert np.allclose(c.insertion, insertion, atol=1e-12, rtol=0)
        assert abs(c.deletion_auc - ref_auc(deletion)) < 1e-12
        assert abs(c.insertion_auc - ref_auc(insertion)) < 1e-12
    # the curves start at the image itself / the blank input and end at the other one
    c = got.methods["random"]
    assert c.deletion[0] == pytest.approx(c.insertion[-1], abs=1e-12)
    assert c.insertion[0] == pytest.approx(c.deletion[-1], abs=1e-12)
    if steps > 1:  # the perturbations change the output along the way
        assert len({round(v, 9) for v in c.deletion}) > 2


def test_float32_model_and_an_analysis_as_input():
    model = random_vit(2, image_size=(24, 40))
    loaded = LoadedModel(model, CLASS_NAMES, Preprocessing(image_size=(24, 40)), "vitviz")
    x = input64(2).float()
    a = analyze(loaded, x)
    maps = {"rollout": a.rollout(), "random": random_map(GRID)}
    got = faithfulness(loaded, a, maps, steps=5, device="cpu")
    ref = faithfulness(copy.deepcopy(model).double(), x.double(), maps, steps=5)
    assert got.target_class == ref.target_class == a.top_class
    for name in maps:
        assert np.allclose(got.methods[name].deletion, ref.methods[name].deletion, atol=1e-6)
        assert np.allclose(got.methods[name].insertion, ref.methods[name].insertion, atol=1e-6)


def test_evaluate_methods_measures_the_tables_maps():
    model = random_vit(2, image_size=(24, 40))
    loaded = LoadedModel(model, CLASS_NAMES, Preprocessing(image_size=(24, 40)), "vitviz")
    a = analyze(loaded, input64(2).float())
    got = evaluate_methods(a, ["relevance", "random"], steps=4, params={"random": {"seed": 5}})
    c = got.target_class
    maps = {"relevance": a.relevance(c), "random": random_map(GRID, 5)}
    ref = faithfulness(loaded, a, maps, steps=4)
    assert list(got.methods) == ["relevance", "random"] and ref.target_class == c
    for name in maps:
        assert got.methods[name] == ref.methods[name]
    headless = random_vit(2, image_size=(24, 40), num_classes=0)
    loaded = LoadedModel(headless, [], Preprocessing(image_size=(24, 40)), "vitviz")
    with pytest.raises(ValueError, match="needs a classification head"):
        evaluate_methods(analyze(loaded, input64(2).float()), ["random", "grad-sam"])


def test_batch_size_does_not_change_the_numbers():
    model, x, maps = model64(1), input64(1), sample_maps()
    one = faithfulness(model, x, maps, steps=6, batch_size=1)
    many = faithfulness(model, x, maps, steps=6, batch_size=1000)
    for name in maps:
        assert one.methods[name].deletion == pytest.approx(many.methods[name].deletion, abs=1e-13)
        assert one.methods[name].insertion == pytest.approx(many.methods[name].insertion, abs=1e-13)


def test_order_is_stable_highest_first():
    values = torch.tensor([[1.0, 0.0], [1.0, 0.5]])
    assert patch_order(values).tolist() == [0, 2, 3, 1]
    assert patch_order(np.zeros((2, 3))).tolist() == list(range(6))
    with pytest.raises(ValueError, match="NaN"):
        patch_order(torch.tensor([[0.0, float("nan")]]))


def test_step_counts_and_auc_follow_the_formula():
    for num_patches, steps in ((15, 20), (196, 20), (15, 4), (7, 7)):
        m = step_counts(num_patches, steps)
        assert len(m) == steps + 1 and m[0] == 0 and m[-1] == num_patches
        assert all(a <= b for a, b in itertools.pairwise(m))
        assert m == [(k * num_patches + steps // 2) // steps for k in range(steps + 1)]
    assert auc([1.0, 1.0, 1.0]) == 1.0
    assert auc([1.0, 0.0]) == 0.5
    assert auc([0.0, 1.0, 0.0, 1.0]) == pytest.approx(ref_auc([0.0, 1.0, 0.0, 1.0]))


def test_refusals_are_plain_messages():
    model, x = model64(), input64()
    with pytest.raises(ValueError, match=r"the bad map is \(4, 4\), the model's grid is \(3, 5\)"):
        faithfulness(model, x, {"bad": torch.zeros(4, 4)})
    with pytest.raises(ValueError, match="NaN"):
        faithfulness(model, x, {"nan": torch.full(GRID, float("nan"))})
    with pytest.raises(ValueError, match="steps must be a whole number of at least 1"):
        faithfulness(model, x, {"r": random_map(GRID)}, steps=0)
    with pytest.raises(ValueError, match="has none"):
        faithfulness(random_vit(num_classes=0), torch.zeros(3, 32, 32), {"r": random_map((4, 4))})


# -- the report -----------------------------------------------------------------------------------


def test_report_matches_the_json_schema():
    model, maps = model64(), sample_maps()
    results = [faithfulness(model, input64(i), maps, steps=4, name=f"img{i}.png") for i in range(3)]
    doc = json.loads(json.dumps(report(results)))
    assert set(doc) == {"steps", "images", "summary"} and doc["steps"] == 4
    assert [im["image"] for im in doc["images"]] == ["img0.png", "img1.png", "img2.png"]
    first = doc["images"][0]
    assert set(first) == {"image", "target_class", "methods"}
    entry = first["methods"]["ties"]
    assert set(entry) == {"deletion", "insertion", "deletion_auc", "insertion_auc"}
    assert len(entry["deletion"]) == 5
    for name in maps:
        s = doc["summary"][name]
        assert set(s) == {"deletion_auc", "insertion_auc", "images"} and s["images"] == 3
        mean = sum(r.methods[name].deletion_auc for r in results) / 3
        assert s["deletion_auc"] == pytest.approx(mean, abs=1e-15)
    rows = csv_rows(results)
    text = io.StringIO()
    csv.writer(text).writerows(rows)
    back = list(csv.reader(io.StringIO(text.getvalue())))
    assert back[0][:5] == ["image", "target_class", "method", "deletion_auc", "insertion_auc"]
    assert len(back) == 1 + 3 * len(maps) and len(back[1]) == len(back[0]) == 7 + 2 * 5


def test_report_refuses_mixed_step_counts():
    model, x, maps = model64(), input64(), {"r": random_map(GRID)}
    a = faithfulness(model, x, maps, steps=3)
    b = faithfulness(model, x, maps, steps=4)
    with pytest.raises(ValueError, match="different step counts"):
        report([a, b])


# -- localisation ---------------------------------------------------------------------------------


def test_localise_mass_and_pointing_game():
    values = torch.tensor([[0.1, 0.5], [0.2, -0.3]])
    mask = np.array([[False, True], [True, True]])
    loc = localise(values, mask)
    assert loc.mass_in_mask == pytest.approx(0.7 / 0.8)  # negative values count as 0
    assert loc.pointing_hit is True
    assert localise(values, ~mask).pointing_hit is False
    tie = localise(torch.tensor([[1.0, 1.0]]), np.array([[False, True]]))
    assert tie.pointing_hit is False  # the first maximum decides
    empty = localise(torch.zeros(2, 2), mask)
    assert math.isnan(empty.mass_in_mask) and empty.to_dict()["mass_in_mask"] is None
    with pytest.raises(ValueError, match="mask grid"):
        localise(values, np.ones((3, 3), dtype=bool))


def ref_mask_grid(mask, geometry):
    """Each input pixel: the mask pixel under its centre; a patch is in when > half its are."""
    (gh, gw), p = geometry.grid, geometry.patch_size
    left, top, right, bottom = geometry.region
    H, W = geometry.input_size
    sh, sw = geometry.source_size
    mh, mw = mask.shape
    out = np.zeros((gh, gw), dtype=bool)
    for r in range(gh):
        for c in range(gw):
            inside = 0
            for i in range(r * p, (r + 1) * p):
                for j in range(c * p, (c + 1) * p):
                    xs = (left + (j + 0.5) * (right - left) / W) * mw / sw
                    ys = (top + (i + 0.5) * (bottom - top) / H) * mh / sh
                    inside += bool(mask[min(int(ys), mh - 1), min(int(xs), mw - 1)])
            out[r, c] = inside > p * p / 2
    return out


def blob_mask(h, w, seed):
    g = np.random.default_rng(seed)
    small = g.random((h // 5, w // 5)) > 0.5
    return np.repeat(np.repeat(small, 5, axis=0), 5, axis=1)


def test_mask_to_grid_follows_the_geometry():
    geometry = PatchGeometry((16, 24), 8, (50, 90), (10.0, 5.0, 70.0, 45.0))  # a crop
    mask = blob_mask(50, 90, 0)
    grid = mask_to_grid(mask, geometry)
    assert grid.shape == (2, 3) and grid.dtype == bool
    assert np.array_equal(grid, ref_mask_grid(mask, geometry))
    assert 0 < grid.sum() < 6
    half = mask[::2, ::2]  # the same mask stored at half the resolution
    assert np.array_equal(mask_to_grid(half, geometry), ref_mask_grid(half, geometry))
    with pytest.raises(ValueError, match="a mask must have the image's size"):
        mask_to_grid(np.zeros((50, 50), dtype=bool), geometry)


def test_mask_files_beside_the_image_or_in_a_folder(tmp_path):
    image = tmp_path / "star.png"
    Image.new("RGB", (40, 24)).save(image)
    assert mask_path_for(image) is None
    pixels = np.zeros((24, 40), dtype=np.uint8)
    pixels[8:16, 16:32] = 255
    Image.fromarray(pixels, mode="L").save(tmp_path / "star_mask.png")
    assert mask_path_for(image) == tmp_path / "star_mask.png"
    other = tmp_path / "masks"
    other.mkdir()
    assert mask_path_for(image, other) is None
    Image.fromarray(pixels).save(other / "star_mask.png")
    assert mask_path_for(image, other) == other / "star_mask.png"
    mask = load_mask(tmp_path / "star_mask.png")
    assert mask.dtype == bool and np.array_equal(mask, pixels > 127)
    geometry = PatchGeometry.identity((24, 40), 8)
    grid = mask_to_grid(mask, geometry)
    assert grid.tolist() == [[False] * 5, [False, False, True, True, False], [False] * 5]
    assert np.array_equal(mask_grid_for(image, geometry), grid)
    assert mask_grid_for(tmp_path / "circle.png", geometry) is None


def test_faithfulness_reports_localisation_with_a_mask():
    model, x, maps = model64(), input64(), sample_maps()
    mask = np.zeros(GRID, dtype=bool)
    mask[1, 2:] = True
    results = [faithfulness(model, x, maps, steps=3, mask=mask), faithfulness(model, x, maps)]
    for name, values in maps.items():
        loc = results[0].methods[name].localisation
        assert loc == localise(values, mask)
        assert results[1].methods[name].localisation is None
    doc = json.loads(json.dumps(report(results[:1])))
    entry = doc["images"][0]["methods"]["ties"]
    assert entry["pointing_game"] is True  # the 0.9 lies at (1, 4)
    assert entry["mass_in_mask"] == pytest.approx(0.9 / sum_positive(maps))
    s = doc["summary"]["ties"]
    assert s["masked_images"] == 1 and s["pointing_game"] == 1.0
    assert doc["summary"]["flat"]["mass_in_mask"] is None  # an all-zero map has no mass


def sum_positive(maps):
    return float(maps["ties"].clamp_min(0).sum())
