"""The pyramid kind on timm's Twins-PCPVT: exact (logits 1e-4 relative, attention 1e-5) bare and
as timm's folder, recognised by its tensors, checked by timm at load; its rollout, gradient
rollout and relevance equal float64 references written from docs/methods.md's definition (keys
spread over their sr × sr squares, stages over the 2 × 2 tokens their conv reads, the position
convolution left out as the MLP is); Twins-SVT's window attention laid out block-diagonally
over its stage's grid, exact, and refused at a grid that is not whole windows."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from pyramid_chains import chain_definitions, maps_and_references, reference_row
from torch import Tensor, nn
from zoo_helpers import max_diff, randomize_

from vitviz.checkpoints import CheckpointError, load_checkpoint
from vitviz.explain.methods import get_method
from vitviz.kindapi import kind_of
from vitviz.kinds.pyramid.analysis import analyze_pyramid
from vitviz.kinds.pyramid.families.timm_twins import LIBRARY_MODEL

pytest.importorskip("timm")

SIZE = 64  # stage grids 16×16, 8×8, 4×4, 2×2
HEADS = (1, 2, 2, 4)
SRS = (8, 4, 2, 1)


def tiny_twins(name: str = "twins_pcpvt_small", seed: int = 1) -> nn.Module:
    import timm

    model = timm.create_model(
        name, num_classes=5, depths=(2, 2, 1, 1), embed_dims=(16, 32, 48, 64),
        num_heads=HEADS, mlp_ratios=(2, 2, 2, 2),
        **({"wss": (2, 2, 2, 1)} if "svt" in name else {}),
    )  # fmt: skip
    return randomize_(model, seed=seed)


def _x(seed: int = 0) -> Tensor:
    return torch.randn(1, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def twins(tmp_path_factory):
    """(timm model, bare path, folder path) of a tiny Twins-PCPVT."""
    from timm.models import save_for_hf

    root = tmp_path_factory.mktemp("twins")
    model = tiny_twins()
    bare = root / "twins.pth"
    torch.save(model.state_dict(), bare)
    settings = {"stage_heads": list(HEADS), "preprocessing": {"image_size": [SIZE, SIZE]}}
    bare.with_name(bare.name + ".vitviz.json").write_text(json.dumps(settings))
    folder = root / "twins_folder"
    save_for_hf(model, folder, safe_serialization=True)
    side = {"preprocessing": {"image_size": [SIZE, SIZE]}}
    folder.with_name(folder.name + ".vitviz.json").write_text(json.dumps(side))
    return model, bare, folder


@pytest.mark.parametrize("form", ["bare", "folder"])
def test_logits_and_attention_exact(twins, form) -> None:
    model, bare, folder = twins
    loaded = load_checkpoint(bare if form == "bare" else folder)
    assert kind_of(loaded).name == "pyramid"
    cfg = loaded.model.config
    assert (cfg.heads, cfg.pos_conv, cfg.mlp_dwconv, cfg.embed_overlap, cfg.stage_norms) == (
        HEADS, True, False, False, False,
    )  # fmt: skip
    x = _x()
    ref_logits, ref_attn = LIBRARY_MODEL.read(model, x)
    assert len(ref_attn) == 6
    with torch.no_grad():
        fused = loaded.model(x)
        logits, attn = kind_of(loaded).library_outputs(loaded.model, x)
    scale = float(ref_logits.abs().max())
    assert max_diff(fused, ref_logits) / scale <= 1e-4
    assert max_diff(logits, ref_logits) / scale <= 1e-4
    assert [a.shape for a in attn] == [a.shape for a in ref_attn]
    assert max(max_diff(a, b) for a, b in zip(attn, ref_attn, strict=True)) <= 1e-5
    if form == "folder":
        assert any("checked against timm" in n for n in loaded.notes), loaded.notes


def test_position_conv_matters(twins) -> None:
    """Without the PEG's weights (zeroed) the logits move: the check would see a missing PEG."""
    _, bare, _ = twins
    loaded = load_checkpoint(bare)
    x = _x(4)
    with torch.no_grad():
        before = loaded.model(x)
        for stage in loaded.model.stages:
            stage.pos_conv.proj.weight.zero_()
            stage.pos_conv.proj.bias.zero_()
        assert max_diff(loaded.model(x), before) > 1e-3


def test_bare_timm_name_recognised_and_checked(tmp_path) -> None:
    import timm

    model = timm.create_model("twins_pcpvt_small", num_classes=3)
    model = randomize_(model, seed=2, noise_dtype=torch.float32)
    path = tmp_path / "small.pth"
    torch.save(model.state_dict(), path)
    loaded = load_checkpoint(path)
    assert loaded.model.config.heads == (1, 2, 5, 8)
    assert any("recognised as timm's twins_pcpvt_small" in n for n in loaded.notes)
    assert any("checked against timm" in n for n in loaded.notes), loaded.notes


def test_bare_without_heads_asks_for_them(tmp_path) -> None:
    path = tmp_path / "odd.pth"
    torch.save(tiny_twins().state_dict(), path)
    with pytest.raises(CheckpointError, match="stage_heads"):
        load_checkpoint(path)


def test_wrong_heads_refused_by_the_library_check(twins, tmp_path) -> None:
    from timm.models import save_for_hf

    folder = tmp_path / "f"
    save_for_hf(twins[0], folder, safe_serialization=True)
    side = folder.with_name(folder.name + ".vitviz.json")
    side.write_text('{"stage_heads": [1, 1, 1, 1]}')
    with pytest.raises(CheckpointError, match="differs from timm"):
        load_checkpoint(folder)


@pytest.fixture(scope="module")
def svt(tmp_path_factory):
    """(timm model, folder path) of a tiny Twins-SVT (windows 2 × 2 in stages 1-3)."""
    from timm.models import save_for_hf

    model = tiny_twins("twins_svt_small")
    folder = tmp_path_factory.mktemp("svt") / "svt"
    save_for_hf(model, folder, safe_serialization=True)
    side = {"preprocessing": {"image_size": [SIZE, SIZE]}}
    folder.with_name(folder.name + ".vitviz.json").write_text(json.dumps(side))
    return model, folder


@pytest.mark.parametrize("form", ["bare", "folder"])
def test_svt_exact(svt, form, tmp_path) -> None:
    model, folder = svt
    path = folder
    if form == "bare":
        path = tmp_path / "svt.pth"
        torch.save(model.state_dict(), path)
        settings = {"stage_heads": list(HEADS), "windows": [2, 2, 2, 1]}
        path.with_name(path.name + ".vitviz.json").write_text(json.dumps(settings))
    loaded = load_checkpoint(path)
    assert loaded.model.config.windows == (2, 2, 2, 1)
    x = _x(5)
    ref_logits, ref_attn = LIBRARY_MODEL.read(model, x)
    with torch.no_grad():
        fused = loaded.model(x)
        logits, attn = kind_of(loaded).library_outputs(loaded.model, x)
    scale = float(ref_logits.abs().max())
    assert max_diff(fused, ref_logits) / scale <= 1e-4
    assert max_diff(logits, ref_logits) / scale <= 1e-4
    assert attn[0].shape == (1, 64, 1, 4, 4)  # timm's layout: (B, windows, heads, t, t)
    assert [a.shape for a in attn] == [a.shape for a in ref_attn]
    assert max(max_diff(a, b) for a, b in zip(attn, ref_attn, strict=True)) <= 1e-5
    if form == "folder":
        assert any("checked against timm" in n for n in loaded.notes), loaded.notes


def test_svt_bare_without_windows_asks_for_them(svt, tmp_path) -> None:
    path = tmp_path / "svt.pth"
    torch.save(svt[0].state_dict(), path)
    path.with_name(path.name + ".vitviz.json").write_text('{"stage_heads": [1, 2, 2, 4]}')
    with pytest.raises(CheckpointError, match="windows"):
        load_checkpoint(path)


def test_svt_grid_not_whole_windows_refused(svt, tmp_path) -> None:
    loaded = load_checkpoint(svt[1])
    with pytest.raises(ValueError, match="not whole 2×2 windows"):
        analyze_pyramid(loaded, torch.randn(3, 72, 72))  # stage 2: 9 × 9 tokens
    from timm.models import save_for_hf

    folder = tmp_path / "svt72"
    save_for_hf(svt[0], folder, safe_serialization=True)
    side = {"preprocessing": {"image_size": [72, 72]}, "image_size": [72, 72]}
    folder.with_name(folder.name + ".vitviz.json").write_text(json.dumps(side))
    with pytest.raises(CheckpointError, match="stage 2's 9×9 tokens are not whole 2×2 windows"):
        load_checkpoint(folder)


# -- the definitions, from scratch in float64 --------------------------------------------------


def _squares(grid, k: int) -> np.ndarray:
    """(coarse, fine) each coarse token spread evenly over the k × k tokens it is made of."""
    mats = []
    for n in grid:
        m = np.zeros((n // k, n))
        for i in range(n // k):
            m[i, i * k : i * k + k] = 1.0 / k
        mats.append(m)
    return np.kron(mats[0], mats[1])


def _timm_attention_and_gradients(model: nn.Module, x: Tensor):
    attn: list[Tensor] = []
    handles = []
    for stage in model.blocks:
        for block in stage:
            block.attn.fused_attn = False
            handles.append(
                block.attn.attn_drop.register_forward_hook(lambda _m, _i, o: attn.append(o))
            )
    try:
        logits = model(x)[0]
    finally:
        for h in handles:
            h.remove()
    c = int(logits.argmax())
    grads = torch.autograd.grad(logits[c], attn)
    return [a[0].detach() for a in attn], [g[0] for g in grads], c


def _reference_row(mats, keys, stages_of, grids, mode, start) -> np.ndarray:
    """start (N_S,) back through every block (the PEG as the identity), full matrices."""
    return reference_row(mats, keys, stages_of, grids, mode, start, lambda f, _c: _squares(f, 2))


def test_maps_equal_their_definitions(twins) -> None:
    model, bare, _ = twins
    loaded = load_checkpoint(bare)
    x = _x(1)
    attn, grads, c = _timm_attention_and_gradients(model, x)
    a = analyze_pyramid(loaded, x[0], gradients=True)
    assert a.target_class == c
    grids, stages_of = a.stage_grids, a.block_stages
    assert grids == [(16, 16), (8, 8), (4, 4), (2, 2)] and stages_of == [0, 0, 1, 1, 2, 3]
    for mine, ref in zip(a.gradients, grads, strict=True):
        assert max_diff(mine, ref) <= 1e-5 * max(float(ref.abs().max()), 1e-3)
    A = [t.double().numpy() for t in attn]
    G = [t.double().numpy() for t in grads]
    keys = [_squares(grids[s], SRS[s]) for s in stages_of]
    hl, wl = grids[-1]
    mean_start = np.full(hl * wl, 1.0 / (hl * wl))
    checked = 0
    for name, query, got, expected in maps_and_references(
        a,
        chain_definitions(A, G),
        ((None, mean_start), ((9, 4), np.eye(hl * wl)[1 * wl + 0])),
        lambda mats, mode, start: _reference_row(mats, keys, stages_of, grids, mode, start),
        grids[0],
    ):
        assert np.isfinite(got).all() and abs(got.max() - 1) < 1e-6
        np.testing.assert_allclose(got, expected, atol=1e-5, err_msg=f"{name} {query}")
        checked += 1
    assert checked == 3 * 2
    why = get_method("transformer-attribution").unavailable(a)
    assert why is not None and "position" in why
    assert np.isfinite(get_method("gradcam")(a, None, None, {}).numpy()).all()


def _dense(a: np.ndarray, grid, ws: int) -> np.ndarray:
    """(windows, heads, t, t) -> (heads, N, N): token (r, c) is token (r % ws)·ws + c % ws of
    window (r // ws)·(W // ws) + c // ws; 0 between windows."""
    H, W = grid
    heads = a.shape[1]
    out = np.zeros((heads, H * W, H * W))
    for i in range(H * W):
        for j in range(H * W):
            (ri, ci), (rj, cj) = divmod(i, W), divmod(j, W)
            wi, wj = (ri // ws) * (W // ws) + ci // ws, (rj // ws) * (W // ws) + cj // ws
            if wi == wj:
                ti, tj = (ri % ws) * ws + ci % ws, (rj % ws) * ws + cj % ws
                out[:, i, j] = a[wi, :, ti, tj]
    return out


def test_svt_maps_equal_their_definitions(svt) -> None:
    model, folder = svt
    loaded = load_checkpoint(folder)
    x = _x(6)
    attn, grads, c = _timm_attention_and_gradients(model, x)
    a = analyze_pyramid(loaded, x[0], gradients=True)
    assert a.target_class == c
    grids, stages_of = a.stage_grids, a.block_stages
    grouped = [0, 2, 4]  # the first block of stages 1-3 (windows 2 × 2)
    A, G = [], []
    for b, (t, g) in enumerate(zip(attn, grads, strict=True)):
        t, g = t.double().numpy(), g.double().numpy()
        if b in grouped:
            t, g = _dense(t, grids[stages_of[b]], 2), _dense(g, grids[stages_of[b]], 2)
        A.append(t)
        G.append(g)
    for mine, ref in zip(a.attentions, A, strict=True):
        np.testing.assert_allclose(mine.double().numpy(), ref, atol=1e-6)
    assert [w is not None for w in a.windows] == [True, False, True, False, True, False]
    assert a.windows[0][3, 5] == 1 * 8 + 2  # row 3, column 5: window (1, 2) of the 8 × 8
    keys = [
        np.eye(grids[s][0] * grids[s][1]) if b in grouped else _squares(grids[s], SRS[s])
        for b, s in enumerate(stages_of)
    ]
    hl, wl = grids[-1]
    mean_start = np.full(hl * wl, 1.0 / (hl * wl))
    checked = 0
    for _name, _query, got, expected in maps_and_references(
        a,
        chain_definitions(A, G, ("rollout", "relevance")),
        ((None, mean_start),),
        lambda mats, mode, start: _reference_row(mats, keys, stages_of, grids, mode, start),
        grids[0],
    ):
        np.testing.assert_allclose(got, expected, atol=1e-5)
        checked += 1
    assert checked == 2
    rows = kind_of(a).layer_rows(a)
    assert "within 2×2 windows" in rows[0].tooltip, rows[0].tooltip
    geometry = kind_of(a).token_geometry(a)
    assert geometry.layers[0].windows is not None and geometry.layers[1].windows is None


def test_words_name_the_twins(twins) -> None:
    _, bare, _ = twins
    loaded = load_checkpoint(bare)
    kind = kind_of(loaded)
    assert kind.architecture(loaded.model).startswith("Twins-PCPVT")
    assert any("position" in p for p in kind.parts(loaded.model))
    assert Path(bare).exists()


def test_the_library_check_builds_the_files_sizes(twins, tmp_path) -> None:
    """--arch names timm's twins_pcpvt_small (widths 64-512, depths 3-4-6-3) for a Twins of
    widths 16-64, depths 2-2-1-1, its heads in the settings: timm's Twins is built with the
    file's sizes and those heads, so the check compares (its note says "checked against
    timm"), never refuses it."""
    model, _, _ = twins
    path = tmp_path / "t.pth"
    torch.save(model.state_dict(), path)
    settings = {"arch": "twins_pcpvt_small", "stage_heads": list(HEADS)}
    loaded = load_checkpoint(path, {**settings, "preprocessing": {"image_size": [SIZE, SIZE]}})
    checked = [n for n in loaded.notes if "checked against timm" in n]
    assert len(checked) == 1 and checked[0].startswith("checked against timm"), loaded.notes
    assert "widths 16, 32, 48, 64, depths 2, 2, 1, 1, heads 1, 2, 2, 4" in checked[0]
