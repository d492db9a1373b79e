"""Map PNGs as figures: a title (method, class, probability) and a colour bar by default;
``--bare`` writes the overlay alone, exactly as before."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import random_vit
from PIL import Image

from vitviz.checkpoints import load_checkpoint, save_checkpoint
from vitviz.cli import main
from vitviz.explain.methods import get_method
from vitviz.imaging.colormaps import apply_colormap
from vitviz.imaging.figure import figure_layout, font_size, scale_labels, titled_figure
from vitviz.kinds.vit.pictures import map_overlay
from vitviz.pipeline.analysis import analyze
from vitviz.pipeline.export import MapSettings, compute_maps, map_levels, map_title, model_line


def _overlay(w: int = 90, h: int = 60) -> Image.Image:
    g = np.random.default_rng(3)
    return Image.fromarray((g.random((h, w, 3)) * 255).astype(np.uint8))


def _dark_pixels(picture: np.ndarray) -> int:
    return int((picture.max(axis=-1) < 100).sum())


def test_figure_holds_the_overlay_unchanged_under_its_title_beside_its_bar() -> None:
    overlay = _overlay()
    lines = ["Attention rollout · prediction 'tench' (87.0%)", "query CLS"]
    fig = titled_figure(overlay, lines, (0.25, 0.75), "magma")
    layout = figure_layout(overlay.size, lines, (0.25, 0.75))
    assert fig.size == layout.size
    assert fig.width > overlay.width and fig.height > overlay.height
    x, y = layout.overlay_at
    pixels = np.asarray(fig)
    np.testing.assert_array_equal(pixels[y : y + 60, x : x + 90], np.asarray(overlay))
    assert _dark_pixels(pixels[:y]) > 20  # the title is drawn above the overlay
    # the bar runs from the colour of the top value (top) to that of the bottom value
    left, top, right, bottom = layout.bar
    column = pixels[top:bottom, (left + right) // 2]
    np.testing.assert_array_equal(column[0], apply_colormap(np.array([1.0]), "magma")[0])
    np.testing.assert_array_equal(column[-1], apply_colormap(np.array([0.0]), "magma")[0])
    assert len({tuple(c) for c in column}) > 20
    # its scale is labelled: ink right of the bar
    assert _dark_pixels(pixels[top:bottom, right + 2 :]) > 10


def test_a_flat_map_gets_a_one_colour_bar() -> None:
    overlay = _overlay()
    fig = np.asarray(titled_figure(overlay, ["flat"], (0.5, 0.5), "viridis"))
    left, top, right, bottom = figure_layout(overlay.size, ["flat"], (0.5, 0.5)).bar
    column = fig[top:bottom, (left + right) // 2]
    assert {tuple(c) for c in column} == {tuple(apply_colormap(np.array([0.0]), "viridis")[0])}


def test_scale_labels_and_font_size_follow_their_inputs() -> None:
    assert scale_labels((0.0, 2.0)) == [(0.0, "0"), (0.5, "1"), (1.0, "2")]
    assert scale_labels((-1e-4, 3e-4))[2] == (1.0, "0.0003")
    assert font_size((200, 100)) < font_size((4096, 3000))


@pytest.fixture
def image(tmp_path: Path) -> Path:
    g = np.random.default_rng(0)
    pixels = (g.random((30, 45, 3)) * 255).astype(np.uint8)
    pixels[8:20, 10:30] = (250, 40, 30)
    path = tmp_path / "scene.png"
    Image.fromarray(pixels).save(path)
    return path


def test_titles_name_method_class_probability_and_parameters(tiny_ckpt: Path, image: Path) -> None:
    a = analyze(load_checkpoint(tiny_ckpt), image, gradients=True)
    top, c = a.top_class, (a.top_class + 1) % len(a.class_names)  # c: another class
    settings = MapSettings(fusion="max", discard_ratio=0.2, target_class=c)
    maps = compute_maps(a, settings)
    p_top, p_c = float(a.probs[top]), float(a.probs[c])
    # the rollout (class-agnostic) names the prediction, relevance the class explained
    rollout = map_title(a, maps, "rollout", settings)
    assert rollout[0] == (
        f"{get_method('rollout').label} · prediction '{a.class_names[top]}' ({p_top:.1%})"
    )
    assert "fusion max" in rollout[1] and "discard_ratio 0.2" in rollout[1]
    relevance = map_title(a, maps, "relevance")
    assert (
        relevance[0] == f"{get_method('relevance').label} · class '{a.class_names[c]}' ({p_c:.1%})"
    )
    assert relevance[1] == "query CLS"
    # Score-CAM takes no gradient but explains a class all the same: its title names it
    score = map_title(a, maps, "scorecam")
    assert score[0] == f"{get_method('scorecam').label} · class '{a.class_names[c]}' ({p_c:.1%})"


def test_a_cam_title_names_the_layer_auto_reads(tiny_ckpt: Path, image: Path) -> None:
    """A CAM's ``layer auto`` is said with the layer it reads (the last block's norm1 of this
    pre-norm ViT, DESIGN §5), as the window's picker says it; a layer named stays as named."""
    loaded = load_checkpoint(tiny_ckpt)
    a = analyze(loaded, image, gradients=True)
    last = loaded.model.config.depth - 1
    auto = map_title(
        a, compute_maps(a, MapSettings(methods=("gradcam",))), "gradcam", MapSettings()
    )
    assert auto[1] == f"query CLS · layer auto ({last}.norm1)", auto
    named = MapSettings(methods=("gradcam",), params={"gradcam": {"layer": "0.norm2"}})
    title = map_title(a, compute_maps(a, named), "gradcam", named)
    assert title[1] == "query CLS · layer 0.norm2", title


def test_title_of_a_model_without_a_head(tmp_path: Path) -> None:
    loaded = load_checkpoint(save_checkpoint(random_vit(num_classes=0), tmp_path / "n.safetensors"))
    a = analyze(loaded, np.zeros((32, 32, 3), dtype=np.uint8))
    title = map_title(a, compute_maps(a), "rollout")
    assert title[0] == f"{get_method('rollout').label} · no classification head"


def _explain(ckpt: Path, image: Path, out: Path, *extra: str) -> int:
    argv = ["explain", str(image), "--checkpoint", str(ckpt), "--device", "cpu"]
    return main([*argv, "--out", str(out), "--class", "3", *extra])


def test_cli_pngs_are_titled_by_default_and_bare_on_request(
    tmp_path: Path, tiny_ckpt: Path, image: Path
) -> None:
    titled, bare = tmp_path / "titled", tmp_path / "bare"
    assert _explain(tiny_ckpt, image, titled, "--method", "grad-sam") == 0
    assert _explain(tiny_ckpt, image, bare, "--method", "grad-sam", "--bare") == 0
    a = analyze(load_checkpoint(tiny_ckpt), image, gradients=True)
    settings = MapSettings(target_class=3, methods=("grad-sam",))
    maps = compute_maps(a, settings)
    arrays = {"rollout": maps.rollout, "relevance": maps.relevance, **maps.methods}
    for name, m in arrays.items():
        with Image.open(bare / f"scene_{name}.png") as im:
            plain = im.convert("RGB")
        # --bare: exactly the overlay written before titles existed
        np.testing.assert_array_equal(np.asarray(plain), np.asarray(map_overlay(a, m)))
        assert plain.size == (45, 30)
        with Image.open(titled / f"scene_{name}.png") as im:
            fig = np.asarray(im.convert("RGB"))
        lines = map_title(a, maps, name, settings)
        layout = figure_layout(plain.size, lines, map_levels(m))
        assert (fig.shape[1], fig.shape[0]) == layout.size
        assert fig.shape[0] > 30 and fig.shape[1] > 45
        x, y = layout.overlay_at
        np.testing.assert_array_equal(fig[y : y + 30, x : x + 45], np.asarray(plain))
    # the head grid: bare, or the same grid under a title (the method, the query and scale, the
    # model) with a colour bar
    with Image.open(bare / "scene_heads.png") as b, Image.open(titled / "scene_heads.png") as t:
        grid, fig = np.asarray(b.convert("RGB")), np.asarray(t.convert("RGB"))
    lines = ["title", "query", *model_line(a)]
    assert len(lines) == 3
    x, y = figure_layout((grid.shape[1], grid.shape[0]), lines, (0, 1)).overlay_at
    assert fig.shape[0] > grid.shape[0] + y - 1 and fig.shape[1] > grid.shape[1] + x + 20
    np.testing.assert_array_equal(fig[y : y + grid.shape[0], x : x + grid.shape[1]], grid)


def test_a_figure_without_title_lines_still_has_its_bar() -> None:
    overlay = _overlay(40, 20)
    fig = titled_figure(overlay, [], (0.0, 1.0))
    layout = figure_layout(overlay.size, [], (0.0, 1.0))
    assert fig.size == layout.size and layout.bar[2] > overlay.width
    x, y = layout.overlay_at
    np.testing.assert_array_equal(np.asarray(fig)[y : y + 20, x : x + 40], np.asarray(overlay))
