"""The window's export of a Swin writes what `vitviz-cli explain` writes for the same image and
model (one writer, ``vitviz.kinds.swin.output``): the npz for the shown method with its parameters
and class, and the map PNG; the head grid export draws every block's and head's thumbnail of the
query, blocks labelled as in the window."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from swin_helpers import tiny_torchvision_swin

from vitviz import cli
from vitviz.kinds.swin.attention import query_row, token_at
from vitviz.pipeline.export import heads_figure
from vitviz.workers import jobs
from vitviz.workers.messages import MapParams

SIZE = 64


@pytest.fixture
def swin_ckpt(tmp_path: Path) -> Path:
    path = tmp_path / "swin_tiny.pth"
    torch.save(tiny_torchvision_swin().state_dict(), path)
    sidecar = path.with_name(path.name + ".vitviz.json")
    sidecar.write_text(json.dumps({"preprocessing": {"image_size": [SIZE, SIZE]}}))
    return path


@pytest.fixture
def state(swin_ckpt: Path, photo_files) -> jobs.EngineState:
    s = jobs.EngineState()
    jobs.load_model(s, swin_ckpt)
    jobs.analyze_image(s, photo_files["chelsea"], "chelsea")
    return s


def _npz(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as npz:
        return {k: npz[k] for k in npz.files}


def _cli(image: Path, ckpt: Path, out: Path, *extra: str) -> Path:
    args = ["explain", str(image), "--checkpoint", str(ckpt), "--out", str(out), *extra]
    assert cli.main(args) == 0
    return out


@pytest.mark.parametrize(
    ("method", "values", "other_class", "cli_extra"),
    [
        ("attention", (), False, []),
        ("rollout", (("fusion", "max"), ("discard_ratio", 0.0)), False, ["--fusion", "max"]),
        ("gradient-rollout", (), True, ["--method", "gradient-rollout"]),
        ("gradcam", (), False, ["--method", "gradcam"]),
    ],
)
def test_npz_equals_the_cli_npz(
    method, values, other_class, cli_extra, state, swin_ckpt, photo_files, tmp_path, capsys
) -> None:
    image = photo_files["chelsea"]
    top = state.analysis.target_class
    target = (top + 1) % 5 if other_class else None
    extra = [*cli_extra, *(["--class", str(target)] if target is not None else [])]
    params = MapParams(method=method, values=values, target_class=target)
    written = jobs.export(state, tmp_path / "window.npz", "npz", params, None, "viridis", 0.6)
    got = _npz(written)
    want = _npz(_cli(image, swin_ckpt, tmp_path / "cli", *extra) / f"{image.stem}.npz")
    assert set(got) == set(want)
    # one npz vocabulary: the rollout is always `rollout`, another method `map_<name>`
    key = "rollout" if method == "rollout" else "map_" + method.replace("-", "_")
    assert "rollout" in got and (method == "attention" or key in got)
    assert int(got["target_class"]) == (top if target is None else target)
    for k, value in want.items():
        assert got[k].shape == value.shape, k
        if value.dtype.kind in "US":
            assert got[k].tolist() == value.tolist(), k
        else:
            # rtol: token_norms (~10) come from each analysis's own pass, with or without
            # gradients, whose float32 rounding differs by an ulp
            np.testing.assert_allclose(got[k], value, rtol=1e-6, atol=1e-6, err_msg=k)
    if method == "rollout":  # the shown fusion reached the npz
        mean = state.analysis.rollout("mean").numpy()
        assert np.abs(got["rollout"] - mean).max() > 1e-3


def test_view_png_equals_the_cli_png(state, swin_ckpt, photo_files, tmp_path) -> None:
    image = photo_files["chelsea"]
    shown = state.analysis.rollout().numpy()  # the map on screen with rollout chosen
    params = MapParams(method="rollout")
    written = jobs.export(state, tmp_path / "view.png", "view", params, shown, "magma", 0.6)
    out = _cli(image, swin_ckpt, tmp_path / "cli", "--colormap", "magma")
    with Image.open(written) as a, Image.open(out / f"{image.stem}_rollout.png") as b:
        got, want = np.asarray(a.convert("RGB"), int), np.asarray(b.convert("RGB"), int)
    assert got.shape == want.shape == (SIZE, SIZE, 3)
    assert np.abs(got - want).max() <= 1


def test_head_grid_png_is_every_block_and_heads_query_row(state, tmp_path) -> None:
    """Block b's tile of head h is the overlay of query_row of the token token_at picks, taken
    at each thumbnail cell's centre; a head the block lacks leaves its tile white."""
    a = state.analysis
    cell = (5, 9)
    written = jobs.export(
        state, tmp_path / "heads.png", "heads", MapParams(query=cell), None, "magma", 0.6
    )
    with Image.open(written) as f:
        got = np.asarray(f.convert("RGB"), int)
    L, most = len(a.attentions), max(int(t.shape[1]) for t in a.attentions)
    expected = np.full((L, most, 16, 16), np.nan, dtype=np.float32)  # 64 px: 16 × 16 cells of 4
    point = ((cell[0] + 0.5) * 4, (cell[1] + 0.5) * 4)
    for b, (attn, layout) in enumerate(zip(a.attentions, a.layouts, strict=True)):
        px = 4 * 2 ** a.block_stages[b]
        row = query_row(attn, layout, token_at(layout, px, point)).numpy()
        row = row.reshape(-1, *layout.grid)
        idx = (np.arange(16) * 4 + 2) // px
        expected[b, : row.shape[0]] = row[:, idx[:, None], idx[None, :]]
    labels = ["0.0 W", "0.1 SW", "1.0 W", "1.1 SW"]
    with np.errstate(all="ignore"):
        means = np.nanmean(expected, axis=1)  # over the heads each block has
    figure = dict(
        row_names=labels,
        title="Window attention of every block and head",
        query="query cell (5, 9)",
        colormap="magma",
        opacity=0.6,
    )
    want = heads_figure(expected, means, a, **figure)  # titled, with a colour bar
    assert got.shape == np.asarray(want).shape
    assert np.abs(got - np.asarray(want, int)).max() <= 1
    bare = np.asarray(heads_figure(expected, means, a, **figure, titled=False))
    assert bare.shape[0] < got.shape[0] and bare.shape[1] < got.shape[1]
    tw, gap = 96, 2  # head_grid_image's tiles: block 1.1 has 2 heads, so its 4th tile is blank
    x = bare.shape[1] - tw
    assert (bare[-4 * (tw + gap) + gap : -3 * (tw + gap), x:] == 255).all()
