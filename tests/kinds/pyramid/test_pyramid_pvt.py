"""The pyramid kind on timm's PVT v2: exact (logits 1e-4 relative, attention 1e-5) bare and as
timm's folder, recognised or refused by its tensors; its rollout, gradient rollout, relevance and
attention maps equal float64 references written from docs/methods.md's definition (keys spread
over the tokens they are made of, stages over the tokens their convolution reads); `vitviz-cli
explain` writes the shared npz keys; the table's other methods are refused with a reason."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from pyramid_chains import chain_definitions, maps_and_references, reference_row
from pyramid_helpers import (
    HEADS,
    SIZE,
    save_bare,
    save_folder,
    timm_attention_and_gradients,
    tiny_timm_pvt,
)
from zoo_helpers import max_diff

from vitviz import cli
from vitviz.checkpoints import CheckpointError, load_checkpoint
from vitviz.explain.methods import get_method
from vitviz.kindapi import kind_of
from vitviz.kinds.pyramid.analysis import analyze_pyramid
from vitviz.kinds.pyramid.families.timm import LIBRARY_MODEL

pytest.importorskip("timm")


def _saved(linear: bool, folder: Path):
    model = tiny_timm_pvt(linear=linear)
    return model, save_bare(model, folder / "pvt.pth"), save_folder(model, folder / "pvt_folder")


@pytest.fixture(scope="module", params=[False, True], ids=["sr", "linear"])
def pvt(request, tmp_path_factory):
    """(timm model, bare path, folder path) of a tiny PVT v2 (strided or linear reduction)."""
    return _saved(request.param, tmp_path_factory.mktemp("pvt"))


def _x(seed: int = 0) -> torch.Tensor:
    return torch.randn(1, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("form", ["bare", "folder"])
def test_logits_and_attention_exact(pvt, form) -> None:
    model, bare, folder = pvt
    loaded = load_checkpoint(bare if form == "bare" else folder)
    assert kind_of(loaded).name == "pyramid"
    assert loaded.model.config.heads == HEADS
    x = _x()
    ref_logits, ref_attn = LIBRARY_MODEL.read(model, x)
    with torch.no_grad():
        fused = loaded.model(x)
        logits, attn = kind_of(loaded).library_outputs(loaded.model, x)
    scale = float(ref_logits.abs().max())
    assert max_diff(fused, ref_logits) / scale <= 1e-4
    assert max_diff(logits, ref_logits) / scale <= 1e-4
    assert max_diff(fused, logits) <= 1e-5  # the fused path and the capture path agree
    assert [a.shape for a in attn] == [a.shape for a in ref_attn]
    assert attn[0].shape[-2] != attn[0].shape[-1]  # queries over reduced keys: not square
    assert max(max_diff(a, b) for a, b in zip(attn, ref_attn, strict=True)) <= 1e-5
    if form == "folder":
        assert any("checked against timm" in n for n in loaded.notes), loaded.notes


def test_bare_timm_name_recognised_and_checked(tmp_path) -> None:
    import timm
    from zoo_helpers import randomize_

    model = timm.create_model("pvt_v2_b0", num_classes=3)
    model = randomize_(model, seed=2, noise_dtype=torch.float32)
    path = tmp_path / "b0.pth"
    torch.save(model.state_dict(), path)
    loaded = load_checkpoint(path)
    assert loaded.model.config.heads == (1, 2, 5, 8)
    assert any("recognised as timm's pvt_v2_b0" in n for n in loaded.notes), loaded.notes
    assert any("checked against timm" in n for n in loaded.notes), loaded.notes
    x = _x(3)
    ref_logits, _ = LIBRARY_MODEL.read(model, x)
    with torch.no_grad():
        assert max_diff(loaded.model(x), ref_logits) / float(ref_logits.abs().max()) <= 1e-4


def test_bare_without_heads_asks_for_them(tmp_path) -> None:
    path = tmp_path / "odd.pth"
    torch.save(tiny_timm_pvt().state_dict(), path)
    with pytest.raises(CheckpointError, match="stage_heads"):
        load_checkpoint(path)


def test_wrong_heads_refused_by_the_library_check(tmp_path) -> None:
    model = tiny_timm_pvt()
    folder = save_folder(model, tmp_path / "f")
    side = folder.with_name(folder.name + ".vitviz.json")
    side.write_text('{"stage_heads": [1, 1, 1, 1]}')
    with pytest.raises(CheckpointError, match="differs from timm"):
        load_checkpoint(folder)


# -- the definitions, from scratch in float64 --------------------------------------------------


def _interval_matrix(intervals: list[tuple[int, int]], size: int) -> np.ndarray:
    out = np.zeros((len(intervals), size))
    for i, (a, b) in enumerate(intervals):
        out[i, a:b] = 1.0 / (b - a)
    return out


def _key_spread(grid, sr: int, linear: bool) -> np.ndarray:
    """K (M × N): key (i, j) spreads its weight evenly over the tokens it is made of."""
    mats = []
    for n in grid:
        if linear:  # AdaptiveAvgPool2d(7): cell i averages rows floor(i·n/7) .. ceil((i+1)·n/7)
            cells = [(math.floor(i * n / 7), math.ceil((i + 1) * n / 7)) for i in range(7)]
        else:  # a conv of kernel = stride = sr reads rows i·sr .. i·sr + sr
            cells = [(i * sr, i * sr + sr) for i in range(n // sr)]
        mats.append(_interval_matrix(cells, n))
    return np.kron(mats[0], mats[1])


def _stage_spread(fine, coarse) -> np.ndarray:
    """D (N_{s+1} × N_s): a token of the next stage spreads its weight evenly over the 3 × 3
    tokens its stride-2 convolution (padding 1) reads, the padding left out."""
    mats = []
    for n, m in zip(fine, coarse, strict=True):
        cells = [(max(2 * i - 1, 0), min(2 * i + 2, n)) for i in range(m)]
        mats.append(_interval_matrix(cells, n))
    return np.kron(mats[0], mats[1])


def _reference_row(mats, keys, stages_of, grids, mode, start) -> np.ndarray:
    """start (N_S,) through every block back to the first, full matrices."""
    return reference_row(mats, keys, stages_of, grids, mode, start, _stage_spread)


def test_maps_equal_their_definitions(pvt) -> None:
    model, bare, _ = pvt
    loaded = load_checkpoint(bare)
    linear = loaded.model.config.linear
    srs = loaded.model.config.sr_ratios
    x = _x(1)
    _, attn, grads, c = timm_attention_and_gradients(model, x)
    a = analyze_pyramid(loaded, x[0], gradients=True)
    assert a.target_class == c
    grids, stages_of = a.stage_grids, a.block_stages
    assert grids == [(16, 16), (8, 8), (4, 4), (2, 2)]
    for mine, ref in zip(a.gradients, grads, strict=True):
        assert max_diff(mine, ref) <= 1e-5 * max(float(ref.abs().max()), 1e-3)
    A = [t.double().numpy() for t in attn]
    G = [t.double().numpy() for t in grads]
    keys = [_key_spread(grids[s], srs[s], linear) for s in stages_of]
    S = len(grids) - 1
    hl, wl = grids[-1]
    mean_start = np.full(hl * wl, 1.0 / (hl * wl))
    cell = (9, 4)  # stage 1 cell; its centre (38, 18) px lies in the last stage's token (1, 0)
    q = 1 * wl + 0
    one = np.eye(hl * wl)[q]
    checked = 0
    for name, query, got, expected in maps_and_references(
        a,
        chain_definitions(A, G),
        ((None, mean_start), (cell, one)),
        lambda mats, mode, start: _reference_row(mats, keys, stages_of, grids, mode, start),
        grids[0],
    ):
        np.testing.assert_allclose(got, expected, atol=1e-5, err_msg=f"{name} {query}")
        checked += 1
    assert checked == 3 * 2
    fused_max = [t.max(axis=0) for t in A]
    row = _reference_row(fused_max, keys, stages_of, grids, "rollout", mean_start)
    got = get_method("rollout")(a, None, None, {"fusion": "max"}).numpy()
    np.testing.assert_allclose(got, (row / row.max()).reshape(grids[0]), atol=1e-5)
    assert S == 3


def test_attention_map_is_the_query_row_spread_over_its_keys(pvt) -> None:
    model, bare, _ = pvt
    loaded = load_checkpoint(bare)
    cfg = loaded.model.config
    x = _x(2)
    _, attn, _, _ = timm_attention_and_gradients(model, x)
    a = analyze_pyramid(loaded, x[0])
    cell = (13, 6)  # centre (54, 26) px
    for b, s in enumerate(a.block_stages):
        H, W = a.stage_grids[s]
        px = 4 * 2**s
        token = (54 // px) * W + 26 // px
        K = _key_spread((H, W), cfg.sr_ratios[s], cfg.linear)
        A = attn[b].double().numpy()
        for head in (-1, 0):
            picked = A.mean(axis=0) if head == -1 else A[head]
            got = get_method("attention")(a, cell, None, {"layer": b, "head": head}).numpy()
            np.testing.assert_allclose(got, (picked[token] @ K).reshape(H, W), atol=1e-6)
        none = get_method("attention")(a, None, None, {"layer": b}).numpy()
        np.testing.assert_allclose(none, (A.mean(axis=0).mean(axis=0) @ K).reshape(H, W), atol=1e-6)
    rows = kind_of(a).layer_rows(a)
    assert [r.label for r in rows] == ["0.0", "1.0", "1.1", "2.0", "3.0"]
    assert [r.heads for r in rows] == [1, 2, 2, 2, 4]
    words = "pooled to 7×7" if cfg.linear else "sr 8"
    assert words in rows[0].tooltip, rows[0].tooltip


def test_other_methods_refused_with_a_reason(pvt) -> None:
    _, bare, _ = pvt
    loaded = load_checkpoint(bare)
    a = analyze_pyramid(loaded, _x()[0])
    why = get_method("transformer-attribution").unavailable(a)
    assert why is not None and "LRP" in why
    assert "CLS" in (get_method("dino-masks").unavailable(a) or "")
    with pytest.raises(ValueError, match="discard_ratio"):
        get_method("rollout")(a, None, None, {"discard_ratio": 0.5})
    from vitviz.explain.random_map import random_map  # the table's own, over the first stage

    want = random_map(tuple(a.stage_grids[0]), 2)
    assert torch.equal(get_method("random")(a, None, None, {"seed": 2}), want)
    stats = kind_of(a).head_statistics(a)
    assert stats["distance"].shape == (5, 4) and np.isnan(stats["distance"][0, 1:]).all()
    assert np.isfinite(stats["entropy"][4]).all() and np.isnan(stats["prefix_share"]).all()


def test_faithfulness_and_cli_explain(photo_files, tmp_path, capsys) -> None:
    from vitviz.explain.faithfulness import evaluate_methods

    _, _, folder = _saved(False, tmp_path)
    loaded = load_checkpoint(folder)
    image = photo_files["chelsea"]
    a = kind_of(loaded).analyze(loaded, image, gradients=True)
    report = evaluate_methods(a, ["rollout", "relevance", "gradcam", "random"], steps=4)
    assert all(0 <= c.deletion_auc <= 1 for c in report.methods.values())
    out = tmp_path / "out"
    code = cli.main(
        ["explain", str(image), "--checkpoint", str(folder), "--out", str(out),
         "--method", "gradcam", "attention"]
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    with np.load(out / f"{image.stem}.npz") as npz:
        got = {k: npz[k] for k in npz.files}
    shared = {"kind", "input", "logits", "probs", "class_names", "rollout", "gradient_rollout"}
    assert shared | {"relevance", "target_class", "stage_grids", "map_gradcam"} <= set(got)
    assert str(got["kind"]) == "pyramid"
    np.testing.assert_array_equal(got["stage_grids"], [[16, 16], [8, 8], [4, 4], [2, 2]])
    np.testing.assert_allclose(got["rollout"], get_method("rollout")(a).numpy(), atol=1e-6)
    np.testing.assert_allclose(got["relevance"], get_method("relevance")(a).numpy(), atol=1e-6)
    assert got["attention_1_1"].shape == a.attentions[2].shape
    assert (out / f"{image.stem}_rollout.png").is_file()
