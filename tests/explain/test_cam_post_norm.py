"""A post-norm block's norm1 follows its attention (DESIGN §5): x + norm1(attn(x)) in a Swin v2,
a SwinV2-CR and a residual post-norm ViT, norm1(x + attn(x)) in a post-norm ViT, so its output
is not the normalised tokens the attention reads. Every kind answers it the same way
(``ModelKind.norm1_is_pre_norm``) and every such model gets the same treatment: the CAM family's
``auto`` reads the last block's output (a pre-norm model's: its norm1), held against Grad-CAM
computed by hand in float64 through a hook on that module (random weights); an explicit
``-1.norm1`` reads that norm; token Grad-CAM of the fixed definition (``token_gradcam``)
refuses the model in one line; the window's picker is told what ``auto`` reads."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from swin_helpers import tiny_timm_swin, tiny_timm_swin_cr
from timm.models import save_for_hf
from torch import Tensor, nn
from zoo_helpers import images, randomize_

from vitviz.checkpoints import LoadedModel, load_checkpoint
from vitviz.explain.gradcam import token_gradcam
from vitviz.explain.methods import get_method
from vitviz.pipeline.analysis import analyze

SIZE, PATCH, CLASSES = 32, 8, 5
GRADIENT_CAMS = ("gradcam", "hirescam", "gradcam-plusplus", "xgradcam", "layercam",
                 "gradcam-elementwise", "eigen-gradcam")  # fmt: skip
POST_NORM = ("rpn-vit", "post-norm-vit", "swin-v2", "swin-v2-cr")
PRE_NORM = ("vit", "swin")


def _own_vit(**options) -> LoadedModel:
    from vitviz.blocks import VisionTransformer, ViTConfig
    from vitviz.checkpoints.native import default_preprocessing

    cfg = ViTConfig(image_size=SIZE, patch_size=PATCH, dim=32, depth=2, heads=4,
                    num_classes=CLASSES, **options)  # fmt: skip
    model = randomize_(VisionTransformer(cfg), seed=3)
    names = [f"c{i}" for i in range(CLASSES)]
    return LoadedModel(model, names, default_preprocessing(cfg), "vitviz")


def _open(name: str, root: Path) -> LoadedModel:
    pooled = dict(class_token=False, global_pool="avg")  # as timm's rpn models
    if name == "rpn-vit":
        return _own_vit(res_post_norm=True, **pooled)
    if name == "post-norm-vit":
        return _own_vit(norm_first=False, **pooled)
    if name == "vit":
        return _own_vit()
    if name == "swin-v2-cr":
        save_for_hf(tiny_timm_swin_cr(SIZE, name="swinv2_cr_tiny_ns_224", seed=1), root)
    else:
        save_for_hf(tiny_timm_swin(SIZE, version=2 if name == "swin-v2" else 1, seed=1), root)
    return load_checkpoint(root)


@pytest.fixture(scope="module", params=POST_NORM + PRE_NORM)
def case(request, tmp_path_factory):
    loaded = _open(request.param, tmp_path_factory.mktemp(request.param))
    image = images(1, SIZE, SIZE, seed=7)[0]
    return request.param, loaded, analyze(loaded, image), image


def hand_gradcam(
    model: nn.Module,
    x: Tensor,
    module: nn.Module,
    c: int,
    grid: tuple[int, int] = (SIZE // PATCH, SIZE // PATCH),
) -> Tensor:
    """Grad-CAM (Selvaraju et al.) of class ``c`` on ``module``'s output in ``model`` for x
    (1, C, H, W): its tokens (a ViT's (1, N, D), its prefix tokens left out, on ``grid``; a
    Swin's (1, H, W, D)), w_d = their gradient's mean over the grid, ReLU(Σ_d w_d A_d); (h, w),
    unscaled, in the model's dtype."""
    kept: list[Tensor] = []
    handle = module.register_forward_hook(
        lambda _m, _i, out: kept.append(out[0] if isinstance(out, tuple) else out)
    )
    try:
        logits = model(x)
    finally:
        handle.remove()
    (G,) = torch.autograd.grad(logits[0, c], kept[0])
    A = kept[0].detach()
    if A.ndim == 3:  # a ViT's tokens: its prefix tokens, then the grid's row-major
        A, G = (t[:, -grid[0] * grid[1] :].unflatten(1, grid) for t in (A, G))
    w = G[0].mean(dim=(0, 1))  # (D,)
    return (A[0] * w).sum(dim=-1).clamp_min(0)


def _scaled(cam: Tensor) -> Tensor:
    lo, hi = cam.min(), cam.max()
    assert hi - lo > 1e-6, "a flat map checks nothing"
    return ((cam - lo) / (hi - lo)).float()


def _pick(
    name: str, model: nn.Module, x: Tensor, modules: dict[str, Callable[[nn.Module], nn.Module]]
) -> tuple[int, dict[str, Tensor]]:
    """The first class whose hand maps at every part of ``modules`` are not flat."""
    for c in range(CLASSES):
        cams = {part: hand_gradcam(model, x, module(model), c) for part, module in modules.items()}
        if all(float(m.max() - m.min()) > 1e-3 for m in cams.values()):
            return c, cams
    raise AssertionError(f"{name}: every class's Grad-CAM is flat")


def test_each_kind_says_whether_its_blocks_norm1_is_a_pre_norm(case) -> None:
    name, loaded, _, _ = case
    kind, model = loaded.kind, loaded.model
    layers = kind.cam_layers(model)
    last = layers.depth - 1
    assert layers.depth == len(model.blocks)
    if name in POST_NORM:
        assert not kind.norm1_is_pre_norm(model, -1)
        assert layers.auto == f"{last}.output" and layers.post_norm == tuple(range(layers.depth))
    else:
        assert kind.norm1_is_pre_norm(model, -1)
        assert layers.auto == f"{last}.norm1" and layers.post_norm == ()


def test_auto_reads_the_last_blocks_output_after_a_post_norm_block(case) -> None:
    """``auto`` is the layer ``cam_layers`` names, for every CAM; on a post-norm model Grad-CAM
    there is the hand Grad-CAM of the last block's output, and ``-1.norm1`` (named by the user)
    reads the norm that follows the attention."""
    name, loaded, a, image = case
    model = copy.deepcopy(loaded.model).double().eval()
    x = image[None].double()
    modules = {"output": lambda m: m.blocks[-1], "norm1": lambda m: m.blocks[-1].norm1}
    auto_part = "output" if name in POST_NORM else "norm1"
    c, want = _pick(name, model, x, {part: modules[part] for part in (auto_part, "norm1")})
    gradcam = get_method("gradcam")
    got = gradcam(a, None, c, {"layer": "auto"})
    torch.testing.assert_close(got, _scaled(want[auto_part]), rtol=0, atol=1e-4)
    torch.testing.assert_close(
        gradcam(a, None, c, {"layer": "-1.norm1"}), _scaled(want["norm1"]), rtol=0, atol=1e-4
    )
    for method in GRADIENT_CAMS:
        torch.testing.assert_close(
            get_method(method)(a, None, c, {"layer": "auto"}),
            get_method(method)(a, None, c, {"layer": f"-1.{auto_part}"}),
            rtol=0,
            atol=0,
            msg=f"{name} {method}",
        )


def test_token_gradcam_refuses_a_post_norm_last_block_in_one_line(case) -> None:
    name, loaded, a, image = case
    assert get_method("gradcam").unavailable(a) is None  # the CAM family's Grad-CAM runs
    if name not in POST_NORM:
        return
    with pytest.raises(ValueError, match="post-norm") as caught:
        token_gradcam(loaded.model, image[None], 0)
    assert "\n" not in str(caught.value)
