"""Faithfulness of a Swin's maps: the curves of ``evaluate_swin_methods``
against a plain float64 loop of the definition (one perturbed image at a time, patches blanked
or restored pixel block by pixel block), for maps computed independently of it: the windowed
rollouts of ``analyze_swin``, token Grad-CAM taken to the first stage's grid by a hand loop, the
seeded random map. Sizes that need padding (windows and an odd grid merged) included."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from faithfulness_reference import ref_auc, ref_curves
from swin_helpers import tiny_torchvision_swin
from test_cam_post_norm import hand_gradcam

from vitviz.checkpoints import load_checkpoint
from vitviz.explain import localise, random_map
from vitviz.kinds.swin.analysis import analyze_swin
from vitviz.kinds.swin.faithfulness import evaluate_swin_methods, first_stage_map
from vitviz.kinds.swin.methods import attention_map

PATCH = 4


@pytest.fixture(scope="module")
def swin64(tmp_path_factory: pytest.TempPathFactory):
    """vitviz's Swin from a tiny torchvision checkpoint, in float64."""
    path = tmp_path_factory.mktemp("swin") / "swin_tiny.pth"
    torch.save(tiny_torchvision_swin(seed=3).state_dict(), path)
    return load_checkpoint(path).model.double().eval()


def _gradcam(model, x: torch.Tensor, c: int) -> torch.Tensor:
    """Grad-CAM at ``auto`` by hand: the last block's norm1 (a Swin v1's: a pre-norm),
    min-max scaled (DESIGN §5)."""
    cam = hand_gradcam(model, x[None], model.blocks[-1].norm1, c)
    return (cam - cam.min()) / (cam.max() - cam.min())


def _input(size: tuple[int, int], seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(70 + seed)
    return torch.randn(3, *size, generator=g).double()


def ref_upsample(small: torch.Tensor, grid0: tuple[int, int]) -> torch.Tensor:
    """A stage-s map to the first stage's grid by hand: patch (y, x) lies in the token of each
    2 × 2 merge (padded at the end when odd) that holds it, once per merge."""
    out = torch.empty(grid0, dtype=torch.float64)
    for y in range(grid0[0]):
        for x in range(grid0[1]):
            ty, tx, (h, w) = y, x, grid0
            while (h, w) != tuple(small.shape):
                ty, tx, h, w = ty // 2, tx // 2, (h + 1) // 2, (w + 1) // 2
            out[y, x] = float(small[ty, tx])
    return out


@pytest.mark.parametrize(("size", "steps"), [((32, 40), 3), ((36, 44), 2)])
def test_curves_equal_the_loop_float64(swin64, size, steps) -> None:
    x = _input(size)
    with torch.no_grad():
        top = int(swin64(x[None])[0].argmax())
    other = (top + 1) % swin64.config.num_classes
    # gradients of another class: the gradient rollout must take the top class's all the same
    analysis = analyze_swin(swin64, x, gradients=True, target_class=other)
    grid0 = tuple(analysis.stage_grids[0])
    assert grid0 == (size[0] // PATCH, size[1] // PATCH)
    names = ["rollout", "gradient-rollout", "gradcam", "random", "attention"]
    got = evaluate_swin_methods(analysis, swin64, names, steps=steps, batch_size=16, name="x")
    assert got.image == "x" and got.steps == steps and got.target_class == top
    top_grads = analyze_swin(swin64, x, gradients=True)
    cam = _gradcam(swin64, x, top)
    assert tuple(cam.shape) == tuple(analysis.stage_grids[-1])
    maps = {
        "rollout": analysis.rollout(),
        "gradient-rollout": top_grads.gradient_rollout(),
        "gradcam": ref_upsample(cam, grid0),
        "random": random_map(grid0, 0),
        "attention": ref_upsample(attention_map(analysis, -1, -1, None), grid0),  # last block
    }
    for name in names:
        target, deletion, insertion = ref_curves(swin64, x, maps[name], steps, PATCH)
        c = got.methods[name]
        assert target == top
        assert len(c.deletion) == len(c.insertion) == steps + 1
        np.testing.assert_allclose(c.deletion, deletion, atol=1e-12, rtol=0)
        np.testing.assert_allclose(c.insertion, insertion, atol=1e-12, rtol=0)
        assert abs(c.deletion_auc - ref_auc(deletion)) < 1e-12
        assert abs(c.insertion_auc - ref_auc(insertion)) < 1e-12
    # the orders differ, so the curves do: the maps were not all the same
    assert len({tuple(np.round(got.methods[n].deletion, 9)) for n in names}) > 2


def test_first_stage_map_takes_each_patch_from_its_token() -> None:
    grid0 = (9, 11)
    stage_grids = [(9, 11), (5, 6), (3, 3)]
    g = torch.Generator().manual_seed(4)
    for grid in stage_grids:
        small = torch.rand(grid, generator=g, dtype=torch.float64)
        got = first_stage_map(small, stage_grids)
        assert got.shape == grid0
        assert torch.equal(got, ref_upsample(small, grid0))
    with pytest.raises(ValueError, match=r"none of the model's stage grids \(9×11, 5×6, 3×3\)"):
        first_stage_map(torch.zeros(4, 4), stage_grids)


def test_a_mask_gives_the_localisation_of_the_map_on_the_patches(swin64) -> None:
    x = _input((32, 48), seed=2)
    analysis = analyze_swin(swin64, x)
    grid0 = tuple(analysis.stage_grids[0])
    mask = np.zeros(grid0, dtype=bool)
    mask[2:6, 3:9] = True
    got = evaluate_swin_methods(analysis, swin64, ["gradcam", "rollout"], steps=3, mask=mask)
    cam = ref_upsample(_gradcam(swin64, x, got.target_class), grid0)
    assert (cam > 0).any()  # a map with mass (ReLU leaves none on some random models)
    for name, values in (("gradcam", cam), ("rollout", analysis.rollout())):
        want = localise(values, mask)
        loc = got.methods[name].localisation
        assert loc.pointing_hit == want.pointing_hit
        assert loc.mass_in_mask == pytest.approx(want.mass_in_mask, abs=1e-6)  # float32 maps


def test_methods_a_swin_lacks_are_refused_before_anything_runs(swin64) -> None:
    analysis = analyze_swin(swin64, _input((32, 32)))
    with pytest.raises(ValueError, match="needs a ViT's CLS token"):
        evaluate_swin_methods(analysis, swin64, ["rollout", "relevance"], steps=2)
    with pytest.raises(ValueError, match="block 0 has 2 heads"):
        params = {"attention": {"layer": 0, "head": 3}}  # block 0 has fewer heads than others
        evaluate_swin_methods(analysis, swin64, ["attention"], steps=2, params=params)
    with pytest.raises(ValueError, match="unknown method 'lime'"):
        evaluate_swin_methods(analysis, swin64, ["lime"], steps=2)


def test_a_swin_from_model_code(tmp_path) -> None:
    """The guides' seed Swin (patch 2) through File ▸ Open model code: its rollout and random
    maps measured as the definition says; token Grad-CAM refused, saying why."""
    from test_modelcode_swin import _open, _seed_model

    loaded = _open(tmp_path, _seed_model(seed=3)[1])
    model = loaded.model
    x = torch.randn(3, 32, 32, generator=torch.Generator().manual_seed(5))
    analysis = analyze_swin(loaded, x)
    got = evaluate_swin_methods(analysis, loaded, ["rollout", "random"], steps=4)
    maps = {"rollout": analysis.rollout(), "random": random_map((16, 16), 0)}
    for name, values in maps.items():
        target, deletion, insertion = ref_curves(model, x, values, 4, patch=2)
        assert got.target_class == target
        np.testing.assert_allclose(got.methods[name].deletion, deletion, atol=1e-6, rtol=0)
        np.testing.assert_allclose(got.methods[name].insertion, insertion, atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="comes from your code"):
        evaluate_swin_methods(analysis, loaded, ["gradcam"], steps=4)
