"""Every method the VOLO kind claims, against float64 references written from docs/methods.md's
definitions ("A VOLO's outlook attention") on timm's own attention (a tiny perturbed VOLO at
64 px: an 8×8 outlook grid of 8 px, 4×4 after the downsample): an outlooker's map is the
clicked cell's row of its token mixing (every window covering the cell, its weights placed on
the cells they read, the padding left out), without a click the rows' mean, and that mixing
is what the layer computes (its heads before the projection are M_h·v_h); a transformer
block's map is the row of the token under the cell (the rows' mean without one), a class
block's the CLS row; Grad-CAM of the logit head(CLS) + 0.5·max aux_head on an outlooker's and
a block's tokens; head statistics; the feature views; what it refuses says why."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from volo_helpers import GRIDS, KINDS, SIZE, save_folder, timm_attention, tiny_timm_volo
from zoo_helpers import images

from vitviz.checkpoints import load_checkpoint
from vitviz.explain.methods import get_method

timm = pytest.importorskip("timm")

ATOL = 1e-5
WINDOWS = (4, 4)  # the outlook windows: 3 × 3, stride 2, padding 1 on the 8×8 grid


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    """(the loaded VOLO, its analysis, timm's attention in float64)."""
    ref = tiny_timm_volo(seed=11)
    loaded = load_checkpoint(save_folder(ref, tmp_path_factory.mktemp("volo") / "volo"))
    x = images(1, SIZE, SIZE, seed=9)
    a = loaded.kind.analyze(loaded, x[0])
    _logits, attn = timm_attention(ref, x)
    return loaded, a, [t[0].double() for t in attn]


def mixing(weights: torch.Tensor) -> torch.Tensor:
    """(heads, 64, 64) M[h, p, q]: Σ over the windows holding both cells of the weight of
    output cell p on input cell q, by loops over every window and pair of its positions."""
    H, W = GRIDS[0]
    M = torch.zeros(weights.shape[0], H * W, H * W, dtype=torch.float64)
    for i in range(WINDOWS[0]):
        for j in range(WINDOWS[1]):
            w = i * WINDOWS[1] + j
            for o in range(9):
                py, px = 2 * i - 1 + o // 3, 2 * j - 1 + o % 3
                for n in range(9):
                    qy, qx = 2 * i - 1 + n // 3, 2 * j - 1 + n % 3
                    if 0 <= py < H and 0 <= px < W and 0 <= qy < H and 0 <= qx < W:
                        M[:, py * W + px, qy * W + qx] += weights[:, w, o, n]
    return M


def _token(cell: tuple[int, int]) -> int:
    """The half grid's token under the centre of 8 px cell ``cell`` (16 px tokens)."""
    return (cell[0] // 2) * GRIDS[1][1] + cell[1] // 2


@pytest.mark.parametrize("query", [None, (0, 0), (3, 4), (7, 2)])
def test_attention_is_each_layers_query_row_on_its_grid(case, query) -> None:
    _, a, attn = case
    for layer, how in enumerate(KINDS):
        if how == "outlook":
            M = mixing(attn[layer])
            rows = M.mean(dim=1) if query is None else M[:, query[0] * 8 + query[1]]
            want = rows.reshape(-1, *GRIDS[0])
        elif how == "class":
            want = attn[layer][:, 0, 1:].reshape(-1, *GRIDS[1])
        else:
            A = attn[layer]
            rows = A.mean(dim=1) if query is None else A[:, _token(query)]
            want = rows.reshape(-1, *GRIDS[1])
        for head in (-1, 1):
            got = get_method("attention")(a, query, None, {"layer": layer, "head": head})
            ref = want.mean(dim=0) if head == -1 else want[head]
            torch.testing.assert_close(got.double(), ref, rtol=0, atol=ATOL)


def test_an_outlookers_rows_are_the_token_mixing_it_computes(case) -> None:
    """The heads before the projection (the accessor's) are M_h·v_h, v = attn.v(norm1(x)),
    so the drawn rows are the weights the layer's output cells read the input cells with."""
    loaded, a, _ = case
    model = copy.deepcopy(loaded.model).double()
    block = model.outlookers[1]
    kept = {}
    hook = block.register_forward_pre_hook(lambda _m, args: kept.__setitem__("x", args[0]))
    try:
        inter = loaded.kind.intermediates(model, a.input[None].double())
    finally:
        hook.remove()
    x = kept["x"][0]  # (8, 8, C)
    with torch.no_grad():
        v = block.attn.v(block.norm1(x)).reshape(64, 6, -1).transpose(0, 1)  # (heads, 64, d)
        weights = block.attn(block.norm1(x)[None])[1][0]
    want = mixing(weights) @ v
    torch.testing.assert_close(inter.heads[1][0].detach(), want, rtol=0, atol=1e-10)
    sums = mixing(weights).sum(dim=-1)  # a corner reads 1 window, an inner cell up to 4
    assert float(sums.max()) > 1.5 and float(sums.min()) <= 1.0


def test_head_statistics_of_the_blocks_and_nan_elsewhere(case) -> None:
    loaded, a, attn = case
    stats = loaded.kind.head_statistics(a)
    h, w = GRIDS[1]
    ys, xs = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    pos = (np.stack([ys.ravel(), xs.ravel()], 1) + 0.5) * 16
    dist = np.linalg.norm(pos[:, None] - pos[None], axis=-1)
    for layer, how in enumerate(KINDS):
        heads = attn[layer].shape[0]
        if how != "self":
            assert np.isnan(stats["distance"][layer]).all()
            continue
        rows = attn[layer].numpy()
        want = (rows * dist).sum(-1).mean(-1)
        np.testing.assert_allclose(stats["distance"][layer, :heads], want, rtol=1e-5)
        assert (stats["prefix_share"][layer, :heads] == 0).all()


def test_the_feature_views_run_on_the_kinds_grids(case) -> None:
    _, a, _ = case
    for name in ("token-norm", "similarity"):
        for layer in (0, 2, -1):
            got = get_method(name)(a, None, None, {"layer": layer})
            assert tuple(got.shape) in set(GRIDS) and torch.isfinite(got).all(), (name, layer)
    pca = get_method("pca")(a, None, None, {})
    assert tuple(pca.shape) == (*GRIDS[1], 3)


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("rollout", "fold"),
        ("gradient-rollout", "fold"),
        ("relevance", "fold"),
        ("grad-sam", "two grids"),
        ("dino-masks", "do not sum to 1"),
        ("transformer-attribution", "outlook fold"),
        ("attention-gradcam", "aux head"),
    ],
)
def test_what_it_cant_run_says_why(case, name, why) -> None:
    _, a, _ = case
    with pytest.raises(ValueError, match=why):
        get_method(name)(a, None, None, {})


@pytest.mark.parametrize(("block", "grid"), [(1, 0), (3, 1), (-1, 1)])
def test_gradcam_on_a_blocks_tokens_is_its_definition_on_its_grid(case, block, grid) -> None:
    """Grad-CAM (DESIGN §5) in float64 of a grid block's output tokens (1: the second
    outlooker, 3: the second transformer block, -1: the last): y_c the model's logit,
    head(CLS)_c + 0.5 · max_t aux_head(t)_c, w_k = mean_ij G_k, ReLU(Σ_k w_k A_k), min-max."""
    loaded, a, _ = case
    model = copy.deepcopy(loaded.model).double()
    blocks = loaded.kind.cam_blocks(model)
    kept = {}
    hook = blocks[block].register_forward_hook(lambda _m, _a, out: kept.__setitem__("t", out[0]))
    try:
        t = model.forward_features(a.input[None].double())[0]
        y = model.head(t[:, 0]) + 0.5 * model.aux_head(t[:, 1:]).max(dim=1)[0]
    finally:
        hook.remove()
    tokens = kept["t"]
    (grad,) = torch.autograd.grad(y[0, a.target_class], tokens)
    h, w = GRIDS[grid]
    A = tokens[0].detach().reshape(h * w, -1).T.reshape(-1, h, w)
    G = grad[0].reshape(h * w, -1).T.reshape(-1, h, w)
    cam = (G.mean(dim=(1, 2))[:, None, None] * A).sum(dim=0).clamp_min(0)
    span = cam.max() - cam.min()
    cam = (cam - cam.min()) / span if span > 0 else torch.zeros_like(cam)  # constant: 0
    got = get_method("gradcam")(a, None, None, {"layer": f"{block}.output"})
    torch.testing.assert_close(got.double(), cam, rtol=0, atol=1e-4)
