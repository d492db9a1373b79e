"""Swin head statistics against dense Â_b, and the named arrays of an .npz export."""

from __future__ import annotations

import math

import numpy as np
import torch
from swin_helpers import tiny_torchvision_swin
from zoo_helpers import images

from vitviz.checkpoints import load_checkpoint
from vitviz.kinds.swin.analysis import analyze_swin
from vitviz.kinds.swin.attention import image_attention
from vitviz.kinds.swin.export import swin_arrays
from vitviz.kinds.swin.stats import swin_head_statistics


def _analysis(tmp_path, size=(60, 52)):
    path = tmp_path / "swin.pth"
    torch.save(tiny_torchvision_swin(window=4).state_dict(), path)
    return analyze_swin(load_checkpoint(path), images(1, *size)[0])


def test_head_statistics_match_dense_attention(tmp_path):
    result = _analysis(tmp_path)
    distances, entropies = swin_head_statistics(
        result.attentions, result.layouts, result.block_stages, patch_size=4
    )
    assert [d.shape[0] for d in distances] == [2, 2, 4, 4]
    for b, layout in enumerate(result.layouts):
        dense = image_attention(result.attentions[b], layout).double()  # (heads, N, N)
        H, W = layout.grid
        pixels = 4 * 2 ** result.block_stages[b]
        N = H * W
        dist = torch.tensor(
            [
                [math.hypot(i // W - j // W, i % W - j % W) * pixels for j in range(N)]
                for i in range(N)
            ],
            dtype=torch.float64,
        )
        want_d = (dense * dist).sum(-1).mean(-1)
        p = dense.clamp_min(1e-300)
        want_e = -(dense * p.log()).sum(-1).mean(-1)
        torch.testing.assert_close(distances[b].double(), want_d, atol=1e-4, rtol=1e-5)
        torch.testing.assert_close(entropies[b].double(), want_e, atol=1e-5, rtol=1e-5)
        assert float(distances[b].min()) > 0


def test_npz_arrays_name_every_block_with_its_geometry(tmp_path):
    result = _analysis(tmp_path)
    arrays = swin_arrays(result)
    np.savez(tmp_path / "swin.npz", **arrays)
    with np.load(tmp_path / "swin.npz") as data:
        keys = sorted(k for k in data.files if k.startswith("window_attention_"))
        assert keys == [f"window_attention_{s}_{j}" for s in (0, 1) for j in (0, 1)]
        np.testing.assert_array_equal(data["window_attention_1_1"], result.attentions[3].numpy())
        np.testing.assert_array_equal(data["stage_grids"], [[15, 13], [8, 7]])
        np.testing.assert_array_equal(data["window_size"], [[4, 4]] * 4)
        np.testing.assert_array_equal(data["shift"], [[0, 0], [2, 2], [0, 0], [2, 2]])
        np.testing.assert_array_equal(data["padded"], [[16, 16], [16, 16], [8, 8], [8, 8]])
        assert int(data["target_class"]) == int(result.logits.argmax())
        assert data["window_attention_0_1"].shape == (16, 2, 16, 16)


def _reference_cams(ref, x, classes: int):
    """(classes, B, H_S, W_S) ReLU(Σ_d w_d F) per class, from torchvision's own model: the last
    block's norm1 output F and the mean of ∂y_c/∂F over the tokens (one forward)."""
    kept = []
    handle = ref.features[3][1].norm1.register_forward_hook(lambda _m, _i, o: kept.append(o))
    logits = ref(x.clone().requires_grad_(True))
    handle.remove()
    cams = []
    for c in range(classes):  # images don't interact: the batch sum gives each its own gradient
        (grads,) = torch.autograd.grad(logits[:, c].sum(), kept[0], retain_graph=True)
        weights = grads.mean(dim=(1, 2), keepdim=True)
        cams.append((kept[0].detach() * weights).sum(-1).clamp_min(0))
    return torch.stack(cams)


def test_gradcam_on_the_last_stage(tmp_path):
    """Grad-CAM at ``auto`` (a Swin v1's last block's norm1: a pre-norm) against the
    definition computed by hand from torchvision's own model."""
    from vitviz.explain.methods import get_method

    ref = tiny_torchvision_swin(window=4)
    path = tmp_path / "swin.pth"
    torch.save(ref.state_dict(), path)
    loaded = load_checkpoint(path)
    x = images(2, 60, 52)
    cams = _reference_cams(ref, x, 5)  # (5, 2, 8, 7)
    # per image, the class with the least flat map (ReLU zeroes many of a random model's maps)
    classes = cams.flatten(2).amax(2).argmax(0)  # (2,)
    cam = cams[classes, torch.arange(2)]
    lo = cam.flatten(1).amin(1)[:, None, None]
    hi = cam.flatten(1).amax(1)[:, None, None]
    assert bool((hi > lo).all()), "a flat Grad-CAM map checks nothing"
    want = (cam - lo) / (hi - lo)
    assert loaded.kind.cam_layers(loaded.model).auto == "3.norm1"
    for i in range(2):
        got = get_method("gradcam")(analyze_swin(loaded, x[i]), None, int(classes[i]))
        assert got.shape == (8, 7)
        torch.testing.assert_close(got, want[i], atol=1e-4, rtol=1e-4)


def test_method_table_says_why_its_vit_methods_do_not_apply_to_a_swin(tmp_path):
    """The table matches ``applies_to`` against SwinTransformer.model_kind: a method written for
    ViTs (CLS token, one grid) refuses a Swin with a sentence naming the kind."""
    from vitviz.explain.methods import all_methods, model_kind

    path = tmp_path / "swin.pth"
    torch.save(tiny_torchvision_swin(window=4).state_dict(), path)
    loaded = load_checkpoint(path)
    model = loaded.model
    assert model_kind(model) == "swin"
    vit_only = [m for m in all_methods() if "swin" not in m.applies_to]
    assert vit_only
    for method in vit_only:
        reason = method.unavailable_on(model, has_head=True, kind=loaded.kind)
        assert reason is not None and "swin" in reason, method.name
