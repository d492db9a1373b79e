"""Every method the PiT kind claims, against float64 references written from docs/methods.md's
definitions ("Across a PiT's stages") on timm's own attention and gradients (tiny perturbed
pit_ti and pit_ti_distilled, 48 px, grids 5×5, 3×3, 2×2): raw attention and DINO masks of a
block's query row on its stage's grid, rollout, gradient rollout and relevance through the
pooling steps, Grad-CAM on the last block's attention; the table's CAM family and feature views
through the kind's accessor give finite maps on the kind's grids; what it refuses says why."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pit_helpers import SIZE, save_folder, timm_attention_and_gradients, tiny_timm_pit
from torch import Tensor
from zoo_helpers import images

from vitviz.checkpoints import load_checkpoint
from vitviz.explain.methods import get_method

timm = pytest.importorskip("timm")

GRIDS = [(5, 5), (3, 3), (2, 2)]
STAGES = [0, 1, 1, 2]  # each block's stage (depths 1-2-1)
PIXELS = [8, 16, 32]
ATOL = 1e-5


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "distilled"])
def case(request, tmp_path_factory):
    """(timm's model, the loaded PiT, the analysis, timm's logits, attention, gradients, c)."""
    ref = tiny_timm_pit(distilled=request.param, seed=11 + request.param)
    loaded = load_checkpoint(save_folder(ref, tmp_path_factory.mktemp("pit") / "pit"))
    x = images(1, SIZE, SIZE, seed=9)
    a = loaded.kind.analyze(loaded, x[0], gradients=True)
    _logits, attn, grads, c = timm_attention_and_gradients(ref, x)
    return ref, loaded, a, [t.double() for t in attn], [g.double() for g in grads], c


def _token(stage: int, cell: tuple[int, int]) -> int:
    """The patch of ``stage`` under the centre of first-stage cell ``cell``."""
    y, x = (cell[0] + 0.5) * 8, (cell[1] + 0.5) * 8
    h, w = GRIDS[stage]
    return min(int(y // PIXELS[stage]), h - 1) * w + min(int(x // PIXELS[stage]), w - 1)


def _pool(stage: int, P: int) -> Tensor:
    """D_stage ((P + N_{s+1}) × (P + N_s)) written out: prefix kept, each patch of stage s+1
    spread evenly over the 3 × 3 patches (inside the grid) its stride-2 conv reads."""
    (h, w), (h2, w2) = GRIDS[stage], GRIDS[stage + 1]
    d = torch.zeros(P + h2 * w2, P + h * w, dtype=torch.float64)
    for k in range(P):
        d[k, k] = 1.0
    for i in range(h2):
        for j in range(w2):
            read = [
                (r, c)
                for r in range(2 * i - 1, 2 * i + 2)
                for c in range(2 * j - 1, 2 * j + 2)
                if 0 <= r < h and 0 <= c < w
            ]
            for r, c in read:
                d[P + i * w2 + j, P + r * w + c] = 1.0 / len(read)
    return d


def _chain(mats: list[Tensor], P: int, start: Tensor, mode: str) -> Tensor:
    """start · M_L · … with D between the stages, every matrix dense (rollout: rownorm(M + I);
    relevance: I + M)."""
    r = start
    for b in reversed(range(len(mats))):
        eye = torch.eye(mats[b].shape[0], dtype=torch.float64)
        if mode == "rollout":
            step = mats[b] + eye
            step = step / step.sum(dim=1, keepdim=True)
        else:
            step = eye + mats[b]
        r = r @ step
        if b and STAGES[b - 1] != STAGES[b]:
            r = r @ _pool(STAGES[b - 1], P)
    return r


def _start(P: int, query: tuple[int, int] | None) -> Tensor:
    r = torch.zeros(P + 4, dtype=torch.float64)
    r[0 if query is None else P + _token(2, query)] = 1.0
    return r


def _patches(r: Tensor, P: int, relevance: bool) -> Tensor:
    m = r[P:]
    if relevance:
        m = m - m.min()
    return (m / m.max()).reshape(GRIDS[0])


@pytest.mark.parametrize("query", [None, (3, 1)])
def test_attention_is_the_query_row_on_its_stage_grid(case, query) -> None:
    _, loaded, a, attn, _, _ = case
    P = loaded.model.config.num_tokens
    for b, s in enumerate(STAGES):
        row = 0 if query is None else P + _token(s, query)
        want = attn[b][:, row, P:].reshape(-1, *GRIDS[s])
        for head in (-1, 1):
            got = get_method("attention")(a, query, None, {"layer": b, "head": head})
            ref = want.mean(dim=0) if head == -1 else want[head]
            torch.testing.assert_close(got.double(), ref, rtol=0, atol=ATOL)


@pytest.mark.parametrize("query", [None, (4, 2)])
def test_rollouts_and_relevance_run_through_the_pools(case, query) -> None:
    _, loaded, a, attn, grads, _ = case
    P = loaded.model.config.num_tokens
    fused = [t.mean(dim=0) for t in attn]
    grad_products = [(t * g).mean(dim=0).clamp_min(0) for t, g in zip(attn, grads, strict=True)]
    relevance = [(g * t).clamp_min(0).mean(dim=0) for t, g in zip(attn, grads, strict=True)]
    start = _start(P, query)
    wants = {
        "rollout": _patches(_chain(fused, P, start, "rollout"), P, False),
        "gradient-rollout": _patches(_chain(grad_products, P, start, "rollout"), P, False),
        "relevance": _patches(_chain(relevance, P, start, "relevance"), P, True),
    }
    for name, want in wants.items():
        got = get_method(name)(a, query, None, {})
        assert tuple(got.shape) == GRIDS[0], name
        torch.testing.assert_close(got.double(), want, rtol=0, atol=ATOL, msg=name)


def test_dino_masks_and_attention_gradcam(case) -> None:
    _, loaded, a, attn, grads, _ = case
    P = loaded.model.config.num_tokens
    b = 1  # block 1.0: stage 1's 3×3 grid
    masks = []
    for row in attn[b][:, 0, P:]:  # per head: the fewest patches holding 60 %
        share = row / row.sum()
        order = share.argsort(descending=True)
        keep, total = torch.zeros_like(share), 0.0
        for j in order:
            if total >= 0.6:
                break
            keep[j], total = 1.0, total + float(share[j])
        masks.append(keep.reshape(GRIDS[1]))
    got = get_method("dino-masks")(a, None, None, {"layer": b, "head": -1, "threshold": 0.6})
    torch.testing.assert_close(got.double(), torch.stack(masks).mean(dim=0), rtol=0, atol=0)
    last, lg = attn[-1][:, 0, P:], grads[-1][:, 0, P:]
    cam = (last * lg.mean(dim=1, keepdim=True)).mean(dim=0).clamp_min(0)
    cam = (cam - cam.min()) / (cam.max() - cam.min())
    got = get_method("attention-gradcam")(a, None, None, {})
    torch.testing.assert_close(got.double(), cam.reshape(GRIDS[2]), rtol=0, atol=ATOL)


def test_the_cam_family_and_feature_views_run_on_the_kinds_grids(case) -> None:
    _, _loaded, a, _, _, _ = case
    grids = set(GRIDS)
    for name in ("gradcam", "hirescam", "layercam", "eigencam", "token-norm", "similarity"):
        for layer in ("auto", "0.norm1", "2.output") if "cam" in name else (0, -1):
            got = get_method(name)(a, None, None, {"layer": layer})
            assert tuple(got.shape) in grids and torch.isfinite(got).all(), (name, layer)
    pca = get_method("pca")(a, None, None, {})
    assert tuple(pca.shape) == (*GRIDS[-1], 3)


def test_what_it_cant_run_says_why(case) -> None:
    _, _, a, _, _, _ = case
    for name, why in (("grad-sam", "different grids"), ("transformer-attribution", "pooling")):
        with pytest.raises(ValueError, match=why):
            get_method(name)(a, None, None, {})
    with pytest.raises(ValueError, match="discard step"):
        get_method("rollout")(a, None, None, {"discard_ratio": 0.5})


def test_a_headless_pit_has_no_classes_and_its_maps_without_a_class(tmp_path) -> None:
    """timm's PiT without a head gives the CLS features: the analysis has no logits, no
    class, and the maps that need none."""
    loaded = load_checkpoint(save_folder(tiny_timm_pit(num_classes=0), tmp_path / "pit"))
    a = loaded.kind.analyze(loaded, images(1, SIZE, SIZE, seed=1)[0])
    assert a.logits.shape == (0,) and a.top_class == -1 and not a.has_head
    assert tuple(get_method("rollout")(a, None, None, {}).shape) == GRIDS[0]
    with pytest.raises(ValueError, match="head"):
        get_method("relevance")(a, None, None, {})


def test_faithfulness_deletes_whole_cells_and_the_margin(case) -> None:
    """A PiT's 5 × 5 cells of 8 px leave 8 px of its 48 px input: the last row's and column's
    cells take them (the last token reads them), so deleting every cell is the all-zero input
    and inserting every cell the image itself (DESIGN §5)."""
    from vitviz.explain.faithfulness import evaluate_methods

    _, loaded, a, _, _, _ = case
    result = evaluate_methods(a, ["rollout"], steps=5)
    curves = result.methods["rollout"]
    c = result.target_class
    with torch.no_grad():
        full = loaded.model(a.input[None]).softmax(dim=-1)[0, c]
        zero = loaded.model(torch.zeros_like(a.input)[None]).softmax(dim=-1)[0, c]
    assert curves.deletion[0] == pytest.approx(float(full), abs=1e-6)
    assert curves.deletion[-1] == pytest.approx(float(zero), abs=1e-6)
    assert curves.insertion[0] == pytest.approx(float(zero), abs=1e-6)
    assert curves.insertion[-1] == pytest.approx(float(full), abs=1e-6)


def test_a_map_picture_draws_the_cells_as_the_window_does(case) -> None:
    """Each first-stage cell over its 8 px square from the top left; the 8 px margin the stem's
    grid leaves is not coloured (the image shows through), the cells are."""
    loaded = case[1]
    rgb = np.random.default_rng(0).integers(0, 255, (SIZE, SIZE, 3), dtype=np.uint8)
    a = loaded.kind.analyze(loaded, rgb)
    picture = np.asarray(loaded.kind.map_picture(a, np.ones(GRIDS[0]), "viridis", None, None))
    image = np.asarray(a.pixels)
    assert picture.shape == image.shape == (SIZE, SIZE, 3)
    assert np.array_equal(picture[40:], image[40:])
    assert np.array_equal(picture[:, 40:], image[:, 40:])
    assert not np.array_equal(picture[:40, :40], image[:40, :40])
