"""Every method the CrossViT kind claims, against float64 references written from
docs/methods.md's definitions ("A CrossViT's two branches") on timm's own attention (tiny
perturbed crossvit_tiny_240 and crossvit_9_dagger_240, 120 px, branch grids 10×10 of 12 px and
7×7 of 16·120/112 px): raw attention and DINO masks of a layer's query row on its key branch's
grid (a ViT block's clicked patch or CLS; a cross-attention layer's one CLS row), head
statistics; the feature views through the kind's accessor give finite maps on the kind's
grids; what it refuses says why."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from crossvit_helpers import (
    GRIDS,
    LAYERS,
    PIXELS,
    SIZE,
    save_folder,
    timm_attention,
    tiny_timm_crossvit,
)
from zoo_helpers import images

from vitviz.checkpoints import load_checkpoint
from vitviz.explain.methods import get_method

timm = pytest.importorskip("timm")

ATOL = 1e-5


@pytest.fixture(scope="module", params=["crossvit_tiny_240", "crossvit_9_dagger_240"])
def case(request, tmp_path_factory):
    """(the loaded CrossViT, its analysis, timm's attention in float64)."""
    ref = tiny_timm_crossvit(request.param, seed=11)
    loaded = load_checkpoint(save_folder(ref, tmp_path_factory.mktemp("cv") / "crossvit"))
    x = images(1, SIZE, SIZE, seed=9)
    a = loaded.kind.analyze(loaded, x[0])
    _logits, attn = timm_attention(ref, x)
    return loaded, a, [t[0].double() for t in attn]


def _token(branch: int, cell: tuple[int, int]) -> int:
    """The patch of ``branch`` under the centre of branch-0 cell ``cell``."""
    y, x = (cell[0] + 0.5) * 12, (cell[1] + 0.5) * 12
    h, w = GRIDS[branch]
    return min(int(y // PIXELS[branch]), h - 1) * w + min(int(x // PIXELS[branch]), w - 1)


def _row(layer: int, query: tuple[int, int] | None) -> int:
    how, branch = LAYERS[layer]
    return 0 if query is None or how == "cross" else 1 + _token(branch, query)


@pytest.mark.parametrize("query", [None, (9, 2), (8, 5)])
def test_attention_is_the_query_row_on_its_key_branchs_grid(case, query) -> None:
    _, a, attn = case
    for layer, (_how, branch) in enumerate(LAYERS):
        want = attn[layer][:, _row(layer, query), 1:].reshape(-1, *GRIDS[branch])
        for head in (-1, 1):
            got = get_method("attention")(a, query, None, {"layer": layer, "head": head})
            ref = want.mean(dim=0) if head == -1 else want[head]
            torch.testing.assert_close(got.double(), ref, rtol=0, atol=ATOL)


def test_a_branch_1_patch_is_the_one_under_the_clicked_point() -> None:
    """Branch 1's tokens are 17.14 input px wide: cell (9, 2) of branch 0 (centre y 114,
    x 30) is branch 1's patch (6, 1), cell (8, 5) (y 102, x 66) its (5, 3), where tokens of
    16 px would read (6, 4)."""
    assert _token(1, (9, 2)) == 6 * 7 + 1 and _token(1, (8, 5)) == 5 * 7 + 3


@pytest.mark.parametrize("layer", [2, 3, 4])
def test_dino_masks_hold_the_threshold_of_the_query_row(case, layer) -> None:
    _, a, attn = case
    branch = LAYERS[layer][1]
    masks = []
    for row in attn[layer][:, _row(layer, (5, 5)), 1:]:  # per head: the fewest patches holding 60 %
        share = row / row.sum()
        order = share.argsort(descending=True)
        keep, total = torch.zeros_like(share), 0.0
        for j in order:
            if total >= 0.6:
                break
            keep[j], total = 1.0, total + float(share[j])
        masks.append(keep.reshape(GRIDS[branch]))
    params = {"layer": layer, "head": -1, "threshold": 0.6}
    got = get_method("dino-masks")(a, (5, 5), None, params)
    torch.testing.assert_close(got.double(), torch.stack(masks).mean(dim=0), rtol=0, atol=0)


def test_head_statistics_per_layer_and_nan_in_the_cross_attention(case) -> None:
    loaded, a, attn = case
    stats = loaded.kind.head_statistics(a)
    for layer, (how, branch) in enumerate(LAYERS):
        heads = attn[layer].shape[0]
        if how == "cross":
            assert np.isnan(stats["distance"][layer]).all()
            continue
        h, w = GRIDS[branch]
        ys, xs = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
        pos = (np.stack([ys.ravel(), xs.ravel()], 1) + 0.5) * PIXELS[branch]
        dist = np.linalg.norm(pos[:, None] - pos[None], axis=-1)
        rows = attn[layer][:, 1:].numpy()  # (heads, N, 1 + N)
        want = (rows[..., 1:] * dist).sum(-1).mean(-1)
        np.testing.assert_allclose(stats["distance"][layer, :heads], want, rtol=1e-5)
        share = rows[..., 0].mean(-1)
        np.testing.assert_allclose(stats["prefix_share"][layer, :heads], share, rtol=1e-5)


def test_the_feature_views_run_on_the_kinds_grids(case) -> None:
    _, a, _ = case
    for name in ("token-norm", "similarity"):
        for layer in (0, 1, -1):
            got = get_method(name)(a, None, None, {"layer": layer})
            assert tuple(got.shape) in set(GRIDS) and torch.isfinite(got).all(), (name, layer)
    pca = get_method("pca")(a, None, None, {})
    assert tuple(pca.shape) == (*GRIDS[1], 3)


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("rollout", "branches meet only through the cross-attention"),
        ("relevance", "branches meet only through the cross-attention"),
        ("grad-sam", "two grids"),
        ("transformer-attribution", "projections between its branches"),
        ("attention-gradcam", "mean of two branches' heads"),
    ],
)
def test_what_it_cant_run_says_why(case, name, why) -> None:
    _, a, _ = case
    with pytest.raises(ValueError, match=why):
        get_method(name)(a, None, None, {})


@pytest.mark.parametrize("block", [0, 2, -1])
def test_gradcam_on_a_blocks_tokens_is_its_definition_on_that_branchs_grid(case, block) -> None:
    """Grad-CAM (DESIGN §5) of a ViT block's output tokens in float64: w_k = mean_ij G_k,
    ReLU(Σ_k w_k A_k), min-max scaled, on the block's own branch grid (blocks 0: branch 0's
    first, 2: branch 1's second, -1: branch 1's last)."""
    import copy

    loaded, a, _ = case
    model = copy.deepcopy(loaded.model).double()
    blocks = loaded.kind.cam_blocks(model)
    kept = {}

    def keep(_module, _args, out) -> None:
        kept["t"] = out[0]

    hook = blocks[block].register_forward_hook(keep)
    try:
        logits = model(a.input[None].double())
    finally:
        hook.remove()
    tokens = kept["t"]
    (grad,) = torch.autograd.grad(logits[0, a.target_class], tokens)
    branch = [b for b, _ in model.self_blocks()][block]
    h, w = GRIDS[branch]
    A = tokens[0, 1:].detach().T.reshape(-1, h, w)
    G = grad[0, 1:].T.reshape(-1, h, w)
    cam = (G.mean(dim=(1, 2))[:, None, None] * A).sum(dim=0).clamp_min(0)
    cam = (cam - cam.min()) / (cam.max() - cam.min())
    got = get_method("gradcam")(a, None, None, {"layer": f"{block}.output"})
    torch.testing.assert_close(got.double(), cam, rtol=0, atol=1e-4)
