"""Every method the MViTv2 kind claims, against float64 references written from docs/methods.md's
definitions ("An MViTv2's pooled attention") on timm's own attention (tiny perturbed MViTv2s with
and without a CLS token, 64 px, query grids 16, 8, 8, 4, 2, key grids 4, 8, 4, 8, 4): a block's
query row over its pooled keys on the key grid (each head and their mean; without a query the
CLS row, or the mean of every query's row), the window's head grid and big map, head statistics;
the table's CAM family and feature views run on the kind's grids; what it refuses says why."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from mvit_helpers import SIZE, save_bare, timm_logits_and_attention, tiny_timm_mvit
from zoo_helpers import images

from vitviz.checkpoints import load_checkpoint
from vitviz.explain.methods import get_method

timm = pytest.importorskip("timm")

QUERY_GRIDS = [(16, 16), (8, 8), (8, 8), (4, 4), (2, 2)]  # per block
QUERY_PIXELS = [4, 8, 8, 16, 32]
KEY_GRIDS = [(4, 4), (8, 8), (4, 4), (8, 8), (4, 4)]
KEY_PIXELS = [16, 8, 16, 8, 16]


@pytest.fixture(scope="module", params=[False, True], ids=["avg", "cls"])
def case(request, tmp_path_factory):
    """(the loaded MViTv2, its analysis, timm's float64 attention per block (heads, P+Nq, P+Nk),
    P)."""
    ref = tiny_timm_mvit(cls=request.param, seed=11 + request.param)
    loaded = load_checkpoint(save_bare(ref, tmp_path_factory.mktemp("mvit") / "mvit.pth"))
    x = images(1, SIZE, SIZE, seed=9)
    a = loaded.kind.analyze(loaded, x[0])
    _, attn = timm_logits_and_attention(ref.double(), x.double())
    return loaded, a, [t[0] for t in attn], int(request.param)


def _query(b: int, cell: tuple[int, int]) -> int:
    """The query token of block b under the centre of first-stage (4 px) cell ``cell``."""
    y, x = (cell[0] + 0.5) * 4, (cell[1] + 0.5) * 4
    h, w = QUERY_GRIDS[b]
    px = QUERY_PIXELS[b]
    return min(int(y // px), h - 1) * w + min(int(x // px), w - 1)


def _row(attn, P: int, b: int, cell) -> torch.Tensor:
    """(heads, kh, kw): the definition's row over the patch keys."""
    A = attn[b]
    if cell is not None:
        r = A[:, P + _query(b, cell)]
    elif P:
        r = A[:, 0]
    else:
        r = A[:, P:].mean(dim=1)
    return r[:, P:].reshape(-1, *KEY_GRIDS[b])


@pytest.mark.parametrize("cell", [None, (0, 0), (5, 11), (15, 15)])
def test_attention_is_the_query_row_over_the_pooled_keys(case, cell) -> None:
    _, a, attn, P = case
    method = get_method("attention")
    for b in range(5):
        want = _row(attn, P, b, cell)
        for head in range(-1, want.shape[0]):
            got = method(a, cell, None, {"layer": b, "head": head})
            ref = want.mean(dim=0) if head == -1 else want[head]
            assert tuple(got.shape) == KEY_GRIDS[b]
            assert float((got.double() - ref).abs().max()) < 1e-5, (b, head)


def test_the_window_draws_each_key_over_its_square(case) -> None:
    """The big map is the row at the key grid; the head grid (16×16 thumbnails of 4 px) repeats
    each key over the thumbnail cells of its square; the CLS share is the row's first entry."""
    from vitviz.kinds.mvit.engine_data import query_maps

    _, a, attn, P = case
    cell = (6, 9)
    maps = query_maps(SimpleNamespace(analysis=a), cell)
    assert maps.head_maps.shape[-2:] == (16, 16)
    for b in range(5):
        want = _row(attn, P, b, cell).numpy()
        assert maps.layer_maps[b].shape == want.shape
        assert np.abs(maps.layer_maps[b] - want).max() < 1e-5
        k = KEY_PIXELS[b] // 4
        heads = want.shape[0]
        spread = np.kron(want, np.ones((1, k, k)))
        assert np.abs(maps.head_maps[b, :heads] - spread).max() < 1e-5
        assert maps.query_tokens[b] == _query(b, cell)
        if P:
            share = attn[b][:, P + _query(b, cell), 0].numpy()
            assert np.abs(maps.prefix_attention[b, :heads, 0] - share).max() < 1e-5


def test_head_statistics_follow_their_definitions(case) -> None:
    """Distance between a query's and a key's cell centres (each grid's own pixels), entropy of
    a patch query's row, its share on the CLS, written out with loops for one block."""
    loaded, a, attn, P = case
    stats = loaded.kind.head_statistics(a)
    b = 1
    A = attn[b]
    (qh, qw), (kh, kw) = QUERY_GRIDS[b], KEY_GRIDS[b]
    qp, kp = QUERY_PIXELS[b], KEY_PIXELS[b]
    for h in range(A.shape[0]):
        dist = ent = share = 0.0
        for i in range(qh * qw):
            row = A[h, P + i]
            qy, qx = (i // qw + 0.5) * qp, (i % qw + 0.5) * qp
            for j in range(kh * kw):
                ky, kx = (j // kw + 0.5) * kp, (j % kw + 0.5) * kp
                dist += float(row[P + j]) * ((qy - ky) ** 2 + (qx - kx) ** 2) ** 0.5
            ent -= float((row * row.log()).sum())
            share += float(row[:P].sum())
        n = qh * qw
        assert stats["distance"][b, h] == pytest.approx(dist / n, rel=1e-4)
        assert stats["entropy"][b, h] == pytest.approx(ent / n, rel=1e-4)
        assert stats["prefix_share"][b, h] == pytest.approx(share / n, abs=1e-6)
    assert np.isnan(stats["distance"][0, 1])  # block 0 has one head


def test_the_cam_family_and_feature_views_run_on_the_kinds_grids(case) -> None:
    _, a, _, _ = case
    grids = set(QUERY_GRIDS)
    for name in ("gradcam", "hirescam", "layercam", "eigencam", "token-norm", "similarity"):
        for layer in ("auto", "1.norm1", "3.norm1", "2.output") if "cam" in name else (0, -1):
            got = get_method(name)(a, None, None, {"layer": layer})
            assert tuple(got.shape) in grids and torch.isfinite(got).all(), (name, layer)


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("rollout", "no attention matrix"),
        ("gradient-rollout", "residual pooling"),
        ("relevance", "depthwise convolutions"),
        ("transformer-attribution", "pooling convolutions"),
        ("grad-sam", "key grids"),
        ("attention-gradcam", "pooled grid"),
        ("dino-masks", "pooled"),
    ],
)
def test_what_it_cant_run_says_why(case, name, why) -> None:
    _, a, _, _ = case
    with pytest.raises(ValueError, match=why):
        get_method(name)(a, None, None, {})


def test_a_map_picture_draws_each_key_over_its_square(case) -> None:
    """Block 0's 4×4 keys of 16 px over a grey image: each key one colour over its 16 px square,
    every square another colour."""
    loaded, _, _, _ = case
    grey = np.full((SIZE, SIZE, 3), 128, dtype=np.uint8)
    a = loaded.kind.analyze(loaded, grey)
    values = np.arange(16, dtype=np.float32).reshape(4, 4)
    picture = np.asarray(loaded.kind.map_picture(a, values, "viridis", None, None))
    assert picture.shape == (SIZE, SIZE, 3)
    colours = set()
    for i in range(4):
        for j in range(4):
            square = picture[16 * i : 16 * i + 16, 16 * j : 16 * j + 16].reshape(-1, 3)
            assert (square == square[0]).all(), (i, j)
            colours.add(tuple(square[0]))
    assert len(colours) == 16
