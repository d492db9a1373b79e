"""The MobileViT kind's methods against float64 references written out here, on timm's own
model (a tiny perturbed ByobNet with MobileViT blocks) run in float64: attention (a clicked
pixel's offset in its p × p patch, its patch's row over every patch, per head and their mean;
the mean of every row without a click) and Grad-CAM on the last transformer layer's output
folded onto its stage's pixel grid. Every other table method is refused with the reason."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from mobilevit_helpers import BARE_SETTINGS, SIZE, save_bare, timm_attention, tiny_timm_mobilevit

from vitviz.checkpoints import load_checkpoint
from vitviz.explain.methods import get_method
from vitviz.kinds.mobilevit.analysis import analyze_mobilevit

pytest.importorskip("timm")
P = 2


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    timm_model = tiny_timm_mobilevit(seed=6)
    loaded = load_checkpoint(save_bare(timm_model, tmp_path_factory.mktemp("m") / "m.pth",
                                       BARE_SETTINGS))  # fmt: skip
    x = torch.randn(3, SIZE, SIZE, generator=torch.Generator().manual_seed(2))
    return timm_model, loaded, x, analyze_mobilevit(loaded, x)


def _reference_rows(attn: torch.Tensor, grid: tuple[int, int], pixel: tuple[int, int]):
    """(heads, nh, nw): pixel (r, c)'s row, by hand: offset o = (r mod p)·p + (c mod p) picks
    the sequence, patch n = (r div p)·nw + (c div p) its row, over the patches."""
    H, W = grid
    nh, nw = H // P, W // P
    r, c = pixel
    o = (r % P) * P + c % P
    n = (r // P) * nw + c // P
    return attn[o, :, n].reshape(-1, nh, nw)  # attn (P, heads, N, N)


def test_attention_is_the_clicked_pixels_offset_row_over_every_patch(case) -> None:
    timm_model, _, x, analysis = case
    _, attn = timm_attention(copy.deepcopy(timm_model).double(), x[None].double())
    # stages' pixel grids 8×8 (cells of 8 px) and 4×4 (16 px); clickable: the first's
    grids = [(8, 8), (8, 8), (4, 4)]
    for cell in ((0, 0), (3, 6), (7, 1)):
        for layer in range(3):
            H, W = grids[layer]
            pixel = (cell[0] * 8 // (SIZE // H), cell[1] * 8 // (SIZE // W))
            want = _reference_rows(attn[layer], grids[layer], pixel)
            for head in (0, 1):
                got = get_method("attention")(analysis, cell, None, {"layer": layer, "head": head})
                np.testing.assert_allclose(got.numpy(), want[head].numpy(), atol=1e-5)
            mean = get_method("attention")(analysis, cell, None, {"layer": layer, "head": -1})
            np.testing.assert_allclose(mean.numpy(), want.mean(dim=0).numpy(), atol=1e-5)
    for layer in range(3):
        H, W = grids[layer]
        want = attn[layer].mean(dim=(0, 2)).mean(dim=0).reshape(H // P, W // P)
        got = get_method("attention")(analysis, None, None, {"layer": layer, "head": -1})
        np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-5)


def test_gradcam_is_the_last_layers_folded_features_weighted_by_their_gradients(case) -> None:
    timm_model, _, x, analysis = case
    model = copy.deepcopy(timm_model).double()
    layer = model.stages[3][1].transformer[0]
    kept = []
    handle = layer.register_forward_hook(lambda _m, _i, o: kept.append(o))
    logits = model(x[None].double())[0]
    handle.remove()
    tokens = kept[0]  # (P, N, C): offset o's sequence of the 2×2 patches
    (grads,) = torch.autograd.grad(logits[int(logits.argmax())], tokens)

    def folded(t: torch.Tensor) -> torch.Tensor:  # (P, N, C) -> (C, 4, 4), pixel by pixel
        out = torch.empty(t.shape[-1], 4, 4, dtype=t.dtype)
        for o in range(P * P):
            for n in range(4):
                out[:, (n // 2) * P + o // P, (n % 2) * P + o % P] = t[o, n]
        return out

    a, g = folded(tokens.detach()), folded(grads)
    cam = (a * g.mean(dim=(1, 2))[:, None, None]).sum(dim=0).clamp_min(0)
    want = (cam - cam.min()) / (cam.max() - cam.min())
    got = get_method("gradcam")(analysis, None, None, {})
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-4)


def test_the_methods_a_mobilevit_cant_run_say_why(case) -> None:
    from vitviz.kinds.mobilevit.methods import CANNOT, METHODS

    kind = case[1].kind
    for name in ("rollout", "gradient-rollout", "relevance"):
        assert "convolutions" in kind.missing_method(name)
    assert set(METHODS) == {"attention", "gradcam"}
    assert not set(METHODS) & set(CANNOT)
    assert "CLS" in kind.missing_method("dino-masks")


def test_head_statistics_are_distance_and_entropy_over_every_offset_and_patch(case) -> None:
    """Distance: Σ_m A[o, n, m]·‖centre_n − centre_m‖ (patch centres in input pixels), averaged
    over every offset o and patch n; entropy of each row, averaged; no prefix share."""
    _, loaded, _, analysis = case
    stats = loaded.kind.head_statistics(analysis)
    for layer, (side, px) in enumerate(((4, 16), (4, 16), (2, 32))):  # patch grids, patch px
        attn = analysis.attentions[layer].double()  # (heads, P, N, N)
        for head in range(2):
            dist = ent = 0.0
            for o in range(P * P):
                for n in range(side * side):
                    for m in range(side * side):
                        a = float(attn[head, o, n, m])
                        dy, dx = (n // side - m // side) * px, (n % side - m % side) * px
                        dist += a * (dy * dy + dx * dx) ** 0.5
                        ent -= a * np.log(a) if a > 0 else 0.0
            count = P * P * side * side
            assert stats["distance"][layer, head] == pytest.approx(dist / count, rel=1e-5)
            assert stats["entropy"][layer, head] == pytest.approx(ent / count, rel=1e-5)
    assert np.isnan(stats["prefix_share"]).all()


def test_an_input_whose_stage_maps_are_no_multiple_of_the_patch_is_refused(case) -> None:
    """At 40 px the second block's map is 5 × 5: the libraries resize it to 6 × 6 before the
    unfold, so its tokens are no pixels of the map; the analysis says so in one line."""
    _, loaded, _, _ = case
    x = torch.randn(3, 40, 40, generator=torch.Generator().manual_seed(3))
    with pytest.raises(ValueError) as refused:
        analyze_mobilevit(loaded, x)
    line = str(refused.value)
    assert "\n" not in line and "5×5" in line and "2×2 patches" in line
