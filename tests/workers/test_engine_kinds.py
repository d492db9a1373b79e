"""The engine and the window ask the model's kind, never test it: every kind meets the engine's
members of the protocol, the messages cross without torch, the job modules and the window name no
kind, and the window draws what an image describes (rows, words, windows) whatever its kind."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from vitviz.kindapi import all_kinds
from vitviz.kindapi.protocol import EngineMembers, LayerGrid, LayerRow, TokenGeometry, ViewWords
from vitviz.workers import jobs
from vitviz.workers.messages import ImageResult, MapParams, MapsResult

ROOT = Path(__file__).resolve().parents[2]
KIND_TEST = re.compile(
    r"\bis_swin\b|isinstance\([^)]*(Swin|ViT|VisionTransformer)|\bswin_\w+|model_kind"
    r"|Swin(Image|Maps)Result|SwinBlockInfo|SwinView"
)
NOT_MINE = {"training_tab.py"}  # the training tab: another slice of the redesign


def test_every_kind_has_the_engine_members() -> None:
    members = [n for n in vars(EngineMembers) if not n.startswith("_")]
    assert "query_maps" in members and "export_npz" in members and len(members) >= 10
    for kind in all_kinds():
        missing = [n for n in members if not callable(getattr(kind, n, None))]
        assert missing == [], f"{kind.name} lacks {missing}"


@pytest.mark.parametrize("module", ["vitviz.workers.messages", "vitviz.kindapi.protocol"])
def test_messages_cross_without_torch(module: str) -> None:
    code = f"import sys, {module}; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_engine_and_the_window_name_no_kind() -> None:
    files = [*(ROOT / "vitviz" / "workers").glob("*.py"), *(ROOT / "vitviz" / "ui").glob("*.py")]
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in files
        if path.name not in NOT_MINE
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if KIND_TEST.search(line)
    ]
    assert found == []
    assert not (ROOT / "vitviz" / "workers" / "swin_jobs.py").exists()


def test_a_vit_image_describes_its_layers(tiny_ckpt: Path, photo_files) -> None:
    """A ViT's rows are "L0", "L1", … on the patch grid, without windows, in a ViT's words."""
    state = jobs.EngineState()
    jobs.load_model(state, tiny_ckpt)
    result = jobs.analyze_image(state, photo_files["chelsea"], "chelsea")
    a = state.analysis
    assert [r.label for r in result.layer_rows] == [f"L{i}" for i in range(a.num_layers)]
    assert result.layer_rows[1].title == f"layer 1 of 0–{a.num_layers - 1}"
    assert all(r.heads == a.num_heads for r in result.layer_rows)
    geometry = result.token_geometry
    assert geometry.grid == tuple(a.grid) and geometry.cell_pixels == a.patch_size
    assert all(g.windows is None and g.grid == tuple(a.grid) for g in geometry.layers)
    assert (result.thumb_grid, result.thumb_pixels) == (tuple(a.grid), a.patch_size)
    assert result.words.query_none == ("CLS token" if a.num_prefix_tokens else "mean of patches")
    maps = jobs.compute_maps(state, MapParams(query=(1, 2)))
    gw = a.grid[1]
    assert maps.query_tokens == (1 * gw + 2,) * a.num_layers
    np.testing.assert_array_equal(maps.layer_map(0, 1), maps.head_maps[0, 1])
    np.testing.assert_array_equal(maps.layer_map(0, -1), maps.mean_maps[0])


def _windowed_image() -> ImageResult:
    """A made-up image of a kind the window has never seen: a 4×4 clickable grid of 8-px cells,
    a first layer in 2×2 windows and a second on a coarser 2×2 grid, in the kind's own words."""
    ids = np.repeat(np.repeat(np.arange(4).reshape(2, 2), 2, 0), 2, 1).astype(np.int32)
    geometry = TokenGeometry(
        input_size=(32, 32),
        grid=(4, 4),
        cell_pixels=8,
        layers=(LayerGrid((4, 4), 8, windows=ids), LayerGrid((2, 2), 16)),
    )
    words = ViewWords(
        layer="stage",
        head="head {head}/{heads}",
        query_none="nothing",
        query_cell="cell {row}-{col}",
        title_query_none="no query",
        title_query="token {trow}:{tcol} of {th}x{tw}",
        method_query_none="pooled",
        method_query="from {trow}:{tcol}",
        method_fixed={"gradcam": "fixed words"},
    )
    rows = (
        LayerRow("a", 2, title="first", hover="stage a", selector=" (a)", name="1"),
        LayerRow("b", 3, title="second", hover="stage b", selector=" (b)", name="2"),
    )
    pixels = np.zeros((32, 32, 3), dtype=np.uint8)
    return ImageResult(
        label="made-up",
        source_path=None,
        display=pixels,
        display_scale=1.0,
        region=(0.0, 0.0, 32.0, 32.0),
        input_pixels=pixels,
        grid=(4, 4),
        patch_size=8,
        num_prefix_tokens=0,
        num_layers=2,
        num_heads=3,
        class_names=[],
        probs=np.zeros(0, np.float32),
        logits=np.zeros(0, np.float32),
        top_class=-1,
        mean_distance=np.zeros((2, 3), np.float32),
        entropy=np.zeros((2, 3), np.float32),
        prefix_share=np.zeros((2, 3), np.float32),
        token_norms=np.zeros((2, 0), np.float32),
        device="cpu",
        seconds=0.0,
        layer_rows=rows,
        token_geometry=geometry,
        words=words,
    )


def _maps(method: str, query: tuple[int, int] | None) -> MapsResult:
    tokens = (-1, -1) if query is None else (query[0] * 4 + query[1], 3)
    head = np.zeros((2, 3, 4, 4), np.float32)
    return MapsResult(
        params=MapParams(query=query, method=method),
        head_maps=head,
        mean_maps=head.mean(1),
        method_map=None,
        target_class=-1,
        prefix_attention=np.zeros((2, 3, 0), np.float32),
        layer_maps=(np.ones((2, 4, 4), np.float32), np.full((3, 2, 2), 2.0, np.float32)),
        query_tokens=tokens,
    )


def test_the_window_draws_what_the_image_describes(qtbot) -> None:
    from vitviz.ui.canvas import ImageCanvas
    from vitviz.ui.layer_view import LayerView

    image = _windowed_image()
    view = LayerView(image)
    assert view.rows() == (["a", "b"], [2, 3]) and view.stats_names() == ["1", "2"]
    assert view.query_text(None) == "nothing" and view.query_text((1, 2)) == "cell 1-2"
    m = _maps("attention", (1, 2))
    assert (
        view.attention_title(m, 0, 1, (1, 2)) == "Attention · first · head 1/2 · token 1:2 of 4x4"
    )
    assert view.attention_title(m, 1, -1, (1, 2)) == (
        "Attention · second · mean of heads · token 1:1 of 2x2"
    )
    assert view.method_words(m, "rollout", (1, 2)) == "from 1:1"
    assert view.method_words(m, "rollout", None) == "pooled"
    assert view.method_words(m, "gradcam", (1, 2)) == "fixed words"
    assert view.describe((1, 0, 0.5)) == "stage b, head 0: 0.5"
    assert m.layer_map(1, -1).shape == (2, 2)  # the layer's own grid
    canvas = ImageCanvas("map")
    qtbot.addWidget(canvas)
    canvas.set_image(image.display, image.region, image.grid)
    view.draw(canvas, m, 0)  # windows: the partition and the query's window outlined
    assert not canvas.window_lines.path().isEmpty()
    assert not canvas.query_window.path().isEmpty()
    view.draw(canvas, m, 1)  # a coarser layer without windows: its token grid, no windows
    assert canvas.window_lines.path().isEmpty()
    assert canvas.query_box.rect().width() == pytest.approx(16.0)
    view.draw(canvas, _maps("rollout", (1, 2)), 0)  # a method's map: no windows
    assert canvas.window_lines.path().isEmpty()
