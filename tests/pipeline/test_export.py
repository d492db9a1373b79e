"""Export: the .npz of every number and the overlay PNGs, shared by the CLI and the window."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import skimage.data
import torch
from conftest import CLASS_NAMES, random_vit
from PIL import Image

from vitviz.checkpoints import LoadedModel, load_checkpoint, save_checkpoint
from vitviz.imaging import Preprocessing
from vitviz.imaging.colormaps import maps_levels
from vitviz.imaging.figure import figure_layout
from vitviz.imaging.overlay import head_grid_image, scale_each_tile
from vitviz.kinds.vit.analysis import Analysis
from vitviz.kinds.vit.pictures import heads_grid, map_overlay
from vitviz.pipeline.analysis import analyze
from vitviz.pipeline.export import NPZ_KEYS, MapSettings, compute_maps, write_npz, write_pngs


@pytest.fixture
def loaded(tiny_ckpt: Path) -> LoadedModel:
    return load_checkpoint(tiny_ckpt)


def _loaded(tmp_path: Path, depth: int, heads: int) -> LoadedModel:
    model = random_vit(depth=depth, heads=heads)
    return load_checkpoint(save_checkpoint(model, tmp_path / f"d{depth}h{heads}.safetensors"))


def _runs(line: np.ndarray, min_len: int = 20) -> int:
    """Number of runs of non-white pixels at least ``min_len`` long along a line of RGB pixels.

    Tiles are colour overlays (never pure white), gaps and margins are white; label glyphs are
    far narrower than ``min_len``.
    """
    filled = ~(line == 255).all(axis=-1)
    count, length = 0, 0
    for f in [*filled.tolist(), False]:
        if f:
            length += 1
        else:
            count += length >= min_len
            length = 0
    return count


def test_npz_keys_are_exactly_the_documented_ones(tmp_path: Path, loaded: LoadedModel) -> None:
    photo = Image.fromarray(skimage.data.astronaut())
    a = analyze(loaded, photo)
    maps = compute_maps(a)
    path = write_npz(a, maps, tmp_path / "out" / "astronaut.npz")
    with np.load(path, allow_pickle=False) as z:
        assert set(z.files) == set(NPZ_KEYS)
        assert set(NPZ_KEYS) == {
            "kind",
            "model_name",
            "model_arch",
            "input",
            "logits",
            "probs",
            "class_names",
            "attention",
            "grid",
            "num_prefix_tokens",
            "rollout",
            "gradient_rollout",
            "relevance",
            "target_class",
            "mean_distance",
            "entropy",
            "layers",
            "logit_lens",
            "token_norms",
        }
        assert z["class_names"].tolist() == CLASS_NAMES
        assert str(z["kind"]) == "vit"
        assert str(z["model_arch"]) == "Vision Transformer"  # model_name: tests/test_model_names
        assert int(z["target_class"]) == a.top_class
        assert z["layers"].tolist() == list(range(a.num_layers))  # every layer kept
        np.testing.assert_array_equal(z["rollout"], a.rollout().numpy())
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["astronaut.npz"]


def test_compute_maps_follows_the_settings(loaded: LoadedModel) -> None:
    a = analyze(loaded, torch.randn(3, 16, 40, generator=torch.Generator().manual_seed(0)))
    settings = MapSettings(fusion="min", discard_ratio=0.2, start_layer=1, target_class=3)
    maps = compute_maps(a, settings)
    assert maps.target_class == 3
    for m in (maps.rollout, maps.gradient_rollout, maps.relevance):
        assert m.shape == (2, 5)
        assert m.dtype == np.float32
    np.testing.assert_array_equal(
        maps.rollout, a.rollout(fusion="min", discard_ratio=0.2, start_layer=1).numpy()
    )
    np.testing.assert_array_equal(
        maps.gradient_rollout, a.gradient_rollout(3, discard_ratio=0.2, start_layer=1).numpy()
    )
    np.testing.assert_array_equal(maps.relevance, a.relevance(3, start_layer=1).numpy())
    assert compute_maps(a).target_class == a.top_class


@pytest.mark.parametrize("name", ["chelsea", "rocket"])
def test_overlays_are_pngs_at_the_photos_resolution(
    tmp_path: Path, loaded: LoadedModel, name: str
) -> None:
    rgb = getattr(skimage.data, name)()
    h, w = rgb.shape[:2]
    a = analyze(loaded, Image.fromarray(rgb))
    written = write_pngs(a, compute_maps(a), tmp_path, name)
    assert sorted(p.name for p in written) == sorted(
        f"{name}_{kind}.png" for kind in ("rollout", "relevance", "heads")
    )
    for kind in ("rollout", "relevance"):
        with Image.open(tmp_path / f"{name}_{kind}.png") as im:
            assert im.format == "PNG"
            assert im.size == (w, h)  # the source photo, not the model's 32 × 32
            pixels = np.asarray(im.convert("RGB"))
        # It is an overlay of the photo, not the photo itself nor a blank image.
        assert not np.array_equal(pixels, rgb)
        assert pixels.std() > 5
    with Image.open(tmp_path / f"{name}_heads.png") as im:
        assert im.format == "PNG"
        im.load()
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob(".*"))


def test_rollout_png_of_a_fit_input_covers_the_whole_photo(
    tmp_path: Path, loaded: LoadedModel
) -> None:
    rgb = skimage.data.coffee()  # 600 × 400
    prep = Preprocessing(image_size=(32, 32), resize="fit")
    a = analyze(loaded, Image.fromarray(rgb), preprocessing=prep)
    assert a.grid[1] > a.grid[0]
    write_pngs(a, compute_maps(a), tmp_path, "coffee")
    with Image.open(tmp_path / "coffee_rollout.png") as im:
        assert im.size == (600, 400)


def test_tensor_input_overlays_the_model_input(tmp_path: Path, loaded: LoadedModel) -> None:
    a = analyze(loaded, torch.randn(3, 16, 40, generator=torch.Generator().manual_seed(1)))
    write_pngs(a, compute_maps(a), tmp_path, "t")
    with Image.open(tmp_path / "t_rollout.png") as im:
        assert im.size == (40, 16)


def test_heads_png_has_one_tile_per_layer_and_head_and_a_mean_column(tmp_path: Path) -> None:
    photo = Image.fromarray(skimage.data.chelsea())
    sizes = {}
    for depth, heads in ((2, 2), (2, 4), (3, 4)):
        a = analyze(_loaded(tmp_path, depth, heads), photo)
        assert a.attention.shape[:2] == (depth, heads)
        stem = f"d{depth}h{heads}"
        write_pngs(a, compute_maps(a), tmp_path, stem)
        with Image.open(tmp_path / f"{stem}_heads.png") as im:
            grid = np.asarray(im.convert("RGB"))
        H, W = grid.shape[:2]
        sizes[(depth, heads)] = (W, H)
        # A line through the last row of tiles crosses the mean and `heads` tiles; a line
        # through the last column crosses `depth` tiles.
        assert _runs(grid[H - 5]) == heads + 1
        assert _runs(grid[:, W - 5]) == depth
    assert sizes[(2, 4)][0] > sizes[(2, 2)][0]  # more heads: wider
    assert sizes[(2, 4)][1] == sizes[(2, 2)][1]
    assert sizes[(3, 4)][1] > sizes[(2, 4)][1]  # more layers: taller
    assert sizes[(3, 4)][0] == sizes[(2, 4)][0]


def test_titled_heads_png_has_a_title_a_colour_bar_and_a_mean_column(
    tmp_path: Path, loaded: LoadedModel
) -> None:
    """As the map PNGs: the titled heads PNG is the bare grid (mean column first)
    under a title, with a colour bar of the shared scale beside it; per head, each tile on its
    own scale and the bar says so."""
    a = analyze(loaded, Image.fromarray(skimage.data.chelsea()))
    maps = a.all_attention_maps().numpy()
    means = maps.mean(axis=1)
    (path,) = [
        p for p in write_pngs(a, compute_maps(a), tmp_path, "c", titled=True) if "heads" in p.name
    ]
    with Image.open(path) as im:
        titled = np.asarray(im.convert("RGB"), int)
    levels = maps_levels(maps, means)  # the window's head-grid scale: 0 to a round number
    bare = head_grid_image(maps, a.pixels, levels=levels, means=means, row_names=["L0", "L1"])
    bare_px = np.asarray(bare, int)
    assert bare_px.shape[1] > np.asarray(head_grid_image(maps, a.pixels), int).shape[1]
    # the bare grid sits where the figure's layout puts it, unchanged
    top = titled.shape[0] - bare_px.shape[0]
    lines_h = [i for i in range(titled.shape[0]) if (titled[i, :, :] < 128).any()]
    assert lines_h and lines_h[0] < top  # dark title text above the grid
    found = [
        (y, x)
        for y in range(0, top + 1)
        for x in range(0, 40)
        if y + bare_px.shape[0] <= titled.shape[0]
        and np.abs(titled[y : y + 8, x : x + 8] - bare_px[:8, :8]).max() == 0
        and np.abs(titled[y : y + bare_px.shape[0], x : x + bare_px.shape[1]] - bare_px).max() <= 0
    ]
    assert found, "the bare grid is not in the titled figure"
    y, x = found[0]
    assert titled.shape[1] > x + bare_px.shape[1] + 20  # the colour bar to its right
    right = titled[y + 5 : y + bare_px.shape[0] - 5, x + bare_px.shape[1] + 2 :]
    colourful = (right.max(axis=-1) - right.min(axis=-1) > 60).any(axis=0)
    assert colourful.any()  # viridis colours, not only grey text
    # per head: every tile on its own scale
    per_head = heads_grid(a, per_head=True, titled=False)
    want = head_grid_image(
        scale_each_tile(maps),
        a.pixels,
        levels=(0.0, 1.0),
        means=scale_each_tile(means),
        row_names=["L0", "L1"],
    )
    np.testing.assert_array_equal(np.asarray(per_head), np.asarray(want))
    assert not np.array_equal(np.asarray(per_head), np.asarray(heads_grid(a, titled=False)))
    assert (
        figure_layout((10, 10), ["t"], (0, 1), [(0.0, "0"), (1.0, "each tile's max")]).size[0]
        > figure_layout((10, 10), ["t"], (0, 1)).size[0]
    )  # the bar's words make room


def test_map_without_a_head_is_nan_and_no_relevance_png(tmp_path: Path) -> None:
    model = random_vit(num_classes=0)
    loaded = load_checkpoint(save_checkpoint(model, tmp_path / "nohead.safetensors"))
    a: Analysis = analyze(
        loaded, torch.randn(3, 32, 32, generator=torch.Generator().manual_seed(2))
    )
    assert a.top_k(5) == []
    maps = compute_maps(a)
    assert maps.target_class == -1
    assert np.isnan(maps.relevance).all() and np.isnan(maps.gradient_rollout).all()
    assert np.isfinite(maps.rollout).all()
    names = sorted(p.name for p in write_pngs(a, maps, tmp_path, "x"))
    assert names == ["x_heads.png", "x_rollout.png"]
    with pytest.raises(ValueError, match="no classification head"):
        a.relevance()


# ----------------------------------------------------------------------------- large photographs


@pytest.fixture(scope="module")
def big_photo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 5000 × 1250 panorama photograph as JPEG: longer than 4096 px, only 6 megapixels."""
    path = tmp_path_factory.mktemp("big") / "big.jpg"
    photo = Image.fromarray(skimage.data.astronaut()).resize(
        (5000, 5000), Image.Resampling.BILINEAR
    )
    photo.crop((0, 1000, 5000, 2250)).save(path, quality=90)
    return path


def _png_size(path: Path) -> tuple[int, int]:
    with Image.open(path) as im:
        assert im.format == "PNG"
        return im.size


def test_big_photo_is_decoded_reduced_with_the_grid_in_place(
    loaded: LoadedModel, big_photo: Path
) -> None:
    prep = Preprocessing(image_size=32, resize="crop", crop_pct=0.875)
    small = analyze(loaded, big_photo, preprocessing=prep)
    full = analyze(loaded, big_photo, preprocessing=prep, max_side=None)
    assert small.source.size == (4096, 1024) and full.source.size == (5000, 1250)
    assert small.geometry.source_size == (1024, 4096)
    # The patch grid covers the same part of the picture, in each one's own pixels.
    scale = np.array([4096 / 5000, 1024 / 1250] * 2)
    np.testing.assert_allclose(
        small.geometry.region, np.array(full.geometry.region) * scale, atol=0.5
    )
    assert small.grid == full.grid
    # The model saw (nearly) the same input: within a grey level on average.
    std = torch.tensor(prep.std).view(-1, 1, 1)
    grey_levels = ((small.input - full.input) * std * 255).abs()
    assert float(grey_levels.mean()) < 1.0
    assert small.top_class == full.top_class
    # An overlay of the full-size analysis is drawn at most 4096 px long unless asked for more.
    m = compute_maps(full).rollout
    assert map_overlay(full, m).size == (4096, 1024)
    assert map_overlay(full, m, max_side=1000).size == (1000, 250)
    assert map_overlay(full, m, max_side=None).size == (5000, 1250)


def test_cli_writes_big_overlays_at_4096_unless_full_size(
    tmp_path: Path, tiny_ckpt: Path, big_photo: Path, capsys: pytest.CaptureFixture
) -> None:
    from vitviz import cli

    base = ["explain", str(big_photo), "--checkpoint", str(tiny_ckpt), "--bare"]
    assert cli.main([*base, "--out", str(tmp_path / "default")]) == 0
    assert cli.main([*base, "--out", str(tmp_path / "full"), "--full-size"]) == 0
    assert "Traceback" not in capsys.readouterr().err
    for kind in ("rollout", "relevance"):
        assert _png_size(tmp_path / "default" / f"big_{kind}.png") == (4096, 1024)
        assert _png_size(tmp_path / "full" / f"big_{kind}.png") == (5000, 1250)
    with (
        np.load(tmp_path / "default" / "big.npz") as small,
        np.load(tmp_path / "full" / "big.npz") as full,
    ):
        assert small["grid"].tolist() == full["grid"].tolist()
        assert int(small["target_class"]) == int(full["target_class"])
        assert np.abs(small["input"] - full["input"]).mean() < 0.02


def test_output_stems_stay_inside_file_name_limits() -> None:
    from vitviz.pipeline.export import MAX_STEM_BYTES, output_stem

    assert output_stem("chelsea") == "chelsea"
    long_a, long_b = "a" * 250 + "x", "a" * 250 + "y"
    stem_a, stem_b = output_stem(long_a), output_stem(long_b)
    assert stem_a != stem_b  # a shared beginning still gives two outputs
    for stem in (stem_a, stem_b, output_stem("é" * 200), output_stem("\udcff" * 300)):
        raw = os.fsencode(stem)
        assert len(raw) <= MAX_STEM_BYTES
        assert len(raw + b"_gradient-rollout.png.tmp-xxxxxxxx") < 255
