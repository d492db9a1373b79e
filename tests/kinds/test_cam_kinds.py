"""Every kind runs every method of the CAM family (DESIGN §5) through the table, on its default
layer and on a block's norm1, norm2 and output: a finite map on that block's grid (one of the
kind's token grids), min-max scaled. Tiny library checkpoints opened through vitviz (the
intermediates tests' builders): a ViT, CaiT, XCiT, a CLIP with prompts, a Swin, PVT v2 and a
Hiera (whose pooling block's norm1 lies on the stage before's grid)."""

from __future__ import annotations

import copy

import pytest
import torch
from test_intermediates_token import BUILDERS
from test_staged_intermediates import _folder, _hiera, _pyramid, _swin
from zoo_helpers import images

from vitviz.checkpoints import load_checkpoint
from vitviz.explain.methods import get_method
from vitviz.pipeline.analysis import analyze

CAMS = ("gradcam", "hirescam", "gradcam-plusplus", "xgradcam", "layercam",
        "gradcam-elementwise", "eigen-gradcam", "eigencam", "scorecam", "ablationcam")  # fmt: skip


def _open(name: str, root) -> tuple[object, tuple[int, int]]:
    if name in ("vit", "cait", "xcit", "clip"):
        (root / name).mkdir()
        case = BUILDERS[name](root / name)
        return case.loaded, case.size
    if name == "swin":
        return load_checkpoint(_swin(root, 1, (32, 32))[1]), (32, 32)
    if name == "convit":  # GPSA blocks over the patches, then the CLS joins
        from test_zoo_convit import tiny_convit

        torch.save(tiny_convit().state_dict(), root / "convit.pth")
        return load_checkpoint(root / "convit.pth"), (32, 32)
    if name == "swin-cr":  # timm's SwinV2-CR: post-norm blocks, extra norm3, no final norm
        from swin_helpers import tiny_timm_swin_cr
        from timm.models import save_for_hf

        save_for_hf(tiny_timm_swin_cr(32, name="swinv2_cr_tiny_ns_224"), root / "cr")
        return load_checkpoint(root / "cr"), (32, 32)
    model = _pyramid("pvt_v2_b0", 1, depths=(1, 2, 1, 1)) if name == "pvt" else _hiera()
    return load_checkpoint(_folder(model, root, name, (64, 64))), (64, 64)


@pytest.fixture(
    scope="module",
    params=["vit", "cait", "convit", "xcit", "clip", "swin", "swin-cr", "pvt", "hiera"],
)
def analysed(request, tmp_path_factory):
    loaded, size = _open(request.param, tmp_path_factory.mktemp(request.param))
    return request.param, loaded, analyze(loaded, images(1, *size, seed=5)[0])


# a Hiera's block 1 opens its second stage: it pools, so its norm1 is on the first stage's grid
LAYERS = ("auto", "0.norm1", "1.norm1", "1.norm2", "-1.output")


def _swin_gradcam(name: str):
    """Grad-CAM by hand on a Swin's ``auto`` layer: the last block's norm1 (a v1's, a pre-norm),
    a SwinV2-CR's last block's output (its norm1 follows the attention; DESIGN §5)."""
    from test_cam_post_norm import hand_gradcam

    from vitviz.explain.tokens import min_max_scale

    def gradcam(model, x, c):
        model = copy.deepcopy(model).double()
        last = model.blocks[-1]
        cam = hand_gradcam(model, x.double(), last.norm1 if name == "swin" else last, c)
        return min_max_scale(cam[None]).float()

    return gradcam


def _todays_gradcam(name: str):
    """The token Grad-CAM each kind ran before the layer parameter: its default must stay (a
    post-norm kind's: its last block's output)."""
    from vitviz.explain.gradcam import token_gradcam
    from vitviz.kinds.pyramid.gradcam import pyramid_token_gradcam

    if name in ("swin", "swin-cr"):
        return _swin_gradcam(name)
    return {"pvt": pyramid_token_gradcam, "hiera": pyramid_token_gradcam}.get(name, token_gradcam)


def test_the_default_layer_is_each_kinds_token_gradcam(analysed) -> None:
    name, loaded, a = analysed
    p = next(loaded.model.parameters())
    c = int(a.top_class)
    want = _todays_gradcam(name)(loaded.model, a.input[None].to(p), c)[0].detach()
    atol = 1e-4 if name.startswith("swin") else 1e-5  # float64 by hand against float32
    torch.testing.assert_close(get_method("gradcam")(a), want.float(), rtol=0, atol=atol)


def test_every_kind_runs_every_cam_on_its_layers(analysed) -> None:
    name, loaded, a = analysed
    kind = loaded.kind
    geometry = kind.token_geometry(a)
    grids = {tuple(geometry.grid)} | {tuple(g.grid) for g in geometry.layers}
    p = next(loaded.model.parameters())
    with torch.no_grad():
        inter = kind.intermediates(loaded.model, a.input[None].to(p))
    for layer in LAYERS:
        for method in CAMS:
            cam = get_method(method)(a, None, None, {"layer": layer})
            where = f"{name} {method} {layer}"
            assert tuple(cam.shape) in grids, where
            assert torch.isfinite(cam).all(), where
            assert float(cam.min()) >= 0 and float(cam.max()) <= 1, where
        block = int(layer.split(".")[0]) if layer != "auto" else -1
        if not (name == "hiera" and layer == "1.norm1"):
            assert tuple(cam.shape) == tuple(inter.block_grids[block].grid), layer
        else:
            assert tuple(cam.shape) == tuple(inter.block_grids[0].grid), layer


def test_a_staged_kind_words_every_cam_on_its_layers_stage_grid(analysed) -> None:
    """A staged kind's map title says a CAM is on its target layer's stage grid (the window
    adds the layer), not the last stage's, for every method of the family."""
    name, loaded, a = analysed
    if name not in ("swin", "pvt", "hiera"):
        return
    fixed = loaded.kind.view_words(a).method_fixed
    assert set(CAMS) <= set(fixed)
    assert all(fixed[m].startswith("its layer's stage grid, over stage 0's") for m in CAMS)
