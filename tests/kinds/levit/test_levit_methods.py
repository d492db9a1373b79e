"""Every method the LeViT kind claims, against float64 references written from docs/methods.md's
definitions ("Across a LeViT's stages") on timm's own attention and gradients (tiny perturbed
levit_128s, distilled and plain, 96 px, grids 6×6, 3×3, 2×2): raw attention of a layer's query
row on its keys' grid (a subsample's over the finer grid), rollout, gradient rollout and
relevance through the subsamples (no residual there); the table's CAM family and feature views
through the kind's accessor give finite maps on the kind's grids; what it refuses says why."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from levit_helpers import save_folder, timm_attention_and_gradients, tiny_timm_levit
from torch import Tensor
from zoo_helpers import images

from vitviz.checkpoints import load_checkpoint
from vitviz.explain.methods import get_method

timm = pytest.importorskip("timm")

SIZE = 96
GRIDS = [(6, 6), (3, 3), (2, 2)]
STAGES = [0, 1, 1, 1, 2, 2]  # each layer's queries' stage (depths 1-2-1, a subsample first)
KEYS = [0, 0, 1, 1, 1, 2]  # each layer's keys' stage
PIXELS = [16, 32, 64]
ATOL = 1e-5


@pytest.fixture(scope="module", params=[True, False], ids=["distilled", "plain"])
def case(request, tmp_path_factory):
    """(timm's model, the loaded LeViT, the analysis, timm's attention, gradients, c)."""
    ref = tiny_timm_levit(distilled=request.param, seed=11 + request.param, size=SIZE)
    loaded = load_checkpoint(save_folder(ref, tmp_path_factory.mktemp("levit") / "levit"))
    x = images(1, SIZE, SIZE, seed=9)
    a = loaded.kind.analyze(loaded, x[0], gradients=True)
    _logits, attn, grads, c = timm_attention_and_gradients(ref, x)
    return ref, loaded, a, [t.double() for t in attn], [g.double() for g in grads], c


def _token(stage: int, cell: tuple[int, int]) -> int:
    """The token of ``stage`` under the centre of first-stage cell ``cell``."""
    y, x = (cell[0] + 0.5) * 16, (cell[1] + 0.5) * 16
    h, w = GRIDS[stage]
    return min(int(y // PIXELS[stage]), h - 1) * w + min(int(x // PIXELS[stage]), w - 1)


def _chain(mats: list[Tensor], start: Tensor, mode: str) -> Tensor:
    """start · M_L · … · M_1, every matrix dense: a block's step rownorm(M + I) (rollout) or
    I + M (relevance), a subsample's rownorm(M) or M (no residual)."""
    r = start
    for b in reversed(range(len(mats))):
        m = mats[b]
        sub = STAGES[b] != KEYS[b]
        step = m if sub else m + torch.eye(m.shape[0], dtype=torch.float64)
        if mode == "rollout":
            step = step / step.sum(dim=1, keepdim=True)
        r = r @ step
    return r


def _start(query: tuple[int, int] | None) -> Tensor:
    n = GRIDS[2][0] * GRIDS[2][1]
    if query is None:
        return torch.full((n,), 1.0 / n, dtype=torch.float64)
    r = torch.zeros(n, dtype=torch.float64)
    r[_token(2, query)] = 1.0
    return r


def _scaled(r: Tensor, relevance: bool) -> Tensor:
    if relevance:
        r = r - r.min()
    return (r / r.max()).reshape(GRIDS[0])


@pytest.mark.parametrize("query", [None, (4, 1)])
def test_attention_is_the_query_row_on_its_keys_grid(case, query) -> None:
    _, _, a, attn, _, _ = case
    for b, s in enumerate(STAGES):
        rows = attn[b].mean(dim=1) if query is None else attn[b][:, _token(s, query)]
        want = rows.reshape(-1, *GRIDS[KEYS[b]])
        for head in (-1, 1):
            got = get_method("attention")(a, query, None, {"layer": b, "head": head})
            ref = want.mean(dim=0) if head == -1 else want[head]
            torch.testing.assert_close(got.double(), ref, rtol=0, atol=ATOL)


@pytest.mark.parametrize("query", [None, (5, 2)])
def test_rollouts_and_relevance_run_through_the_subsamples(case, query) -> None:
    _, _, a, attn, grads, _ = case
    fused = [t.mean(dim=0) for t in attn]
    grad_products = [(t * g).mean(dim=0).clamp_min(0) for t, g in zip(attn, grads, strict=True)]
    relevance = [(g * t).clamp_min(0).mean(dim=0) for t, g in zip(attn, grads, strict=True)]
    start = _start(query)
    wants = {
        "rollout": _scaled(_chain(fused, start, "rollout"), False),
        "gradient-rollout": _scaled(_chain(grad_products, start, "rollout"), False),
        "relevance": _scaled(_chain(relevance, start, "relevance"), True),
    }
    for name, want in wants.items():
        got = get_method(name)(a, query, None, {})
        assert tuple(got.shape) == GRIDS[0], name
        torch.testing.assert_close(got.double(), want, rtol=0, atol=ATOL, msg=name)


def test_the_cam_family_and_feature_views_run_on_the_kinds_grids(case) -> None:
    _, _loaded, a, _, _, _ = case
    grids = set(GRIDS)
    for name in ("gradcam", "hirescam", "layercam", "eigencam", "token-norm", "similarity"):
        for layer in ("auto", "1.output", "3.output", "5.output") if "cam" in name else (0, -1):
            got = get_method(name)(a, None, None, {"layer": layer})
            assert tuple(got.shape) in grids and torch.isfinite(got).all(), (name, layer)
    pca = get_method("pca")(a, None, None, {})
    assert tuple(pca.shape) == (*GRIDS[-1], 3)


def test_what_it_cant_run_says_why(case) -> None:
    _, _, a, _, _, _ = case
    for name, why in (
        ("grad-sam", "different grids"),
        ("transformer-attribution", "subsample"),
        ("dino-masks", "no CLS"),
        ("attention-gradcam", "no CLS"),
    ):
        with pytest.raises(ValueError, match=why):
            get_method(name)(a, None, None, {})
    with pytest.raises(ValueError, match="discard step"):
        get_method("rollout")(a, None, None, {"discard_ratio": 0.5})


def test_a_headless_levit_has_no_classes_and_its_maps_without_a_class(tmp_path) -> None:
    """timm's LeViT without a head gives the mean token: the analysis has no logits, no class,
    and the maps that need none."""
    ref = tiny_timm_levit(num_classes=0, size=SIZE)
    loaded = load_checkpoint(save_folder(ref, tmp_path / "levit"))
    a = loaded.kind.analyze(loaded, images(1, SIZE, SIZE, seed=1)[0])
    assert a.logits.shape == (0,) and a.top_class == -1 and not a.has_head
    assert tuple(get_method("rollout")(a, None, None, {}).shape) == GRIDS[0]
    with pytest.raises(ValueError, match="head"):
        get_method("relevance")(a, None, None, {})


def test_head_statistics_measure_a_subsample_query_from_its_finer_cell(case) -> None:
    """Distance: Σ_k A[q, k]·‖pos_q − pos_k‖ averaged over the queries, a subsample query (i, j)
    at the finer grid's cell (2i, 2j) (its bias's offset 0); entropy in nats; no prefix share."""
    _, loaded, a, attn, _, _ = case
    stats = loaded.kind.head_statistics(a)
    for b in (0, 1, 4):  # a block of stage 0, the subsample to stage 1, the one to stage 2
        (hq, wq), (hk, wk), px = GRIDS[STAGES[b]], GRIDS[KEYS[b]], PIXELS[KEYS[b]]
        step = 2 if STAGES[b] != KEYS[b] else 1
        want = torch.zeros(attn[b].shape[0], dtype=torch.float64)
        for q in range(hq * wq):
            qy, qx = ((q // wq) * step + 0.5) * px, ((q % wq) * step + 0.5) * px
            for k in range(hk * wk):
                ky, kx = (k // wk + 0.5) * px, (k % wk + 0.5) * px
                want += attn[b][:, q, k] * ((qy - ky) ** 2 + (qx - kx) ** 2) ** 0.5
        want /= hq * wq
        heads = attn[b].shape[0]
        torch.testing.assert_close(
            torch.as_tensor(stats["distance"][b, :heads]).double(), want, rtol=1e-5, atol=1e-4
        )
        entropy = -(attn[b] * attn[b].log()).sum(dim=-1).mean(dim=-1)
        torch.testing.assert_close(
            torch.as_tensor(stats["entropy"][b, :heads]).double(), entropy, rtol=1e-5, atol=1e-5
        )
    assert np.isnan(stats["prefix_share"]).all()
