"""The CAM family (DESIGN §5) on a timm ViT (two register tokens: the tutorial's reshape would
fail) and a timm Swin opened through vitviz: each method, on several layers (a block's norm1,
norm2, output), equals a float64 reference written here from its paper's definition (hooks of
the test's own on the model's modules, loops over channels); the table's float32 map equals it
too; the default layer is token Grad-CAM's; and, where the ``grad-cam`` package is importable,
each equals pytorch-grad-cam's map on the same layer and input."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import timm
import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from swin_helpers import tiny_timm_swin
from timm.models import save_for_hf
from torch import Tensor, nn
from zoo_helpers import images, randomize_

from vitviz.checkpoints import load_checkpoint
from vitviz.explain.ablationcam import ablation_cam
from vitviz.explain.cam_layer import CAM_BATCH, CamCancelledError, layer_pass, reporting
from vitviz.explain.eigen_gradcam import eigen_grad_cam
from vitviz.explain.eigencam import eigen_cam
from vitviz.explain.gradcam import grad_cam, token_gradcam
from vitviz.explain.gradcam_elementwise import gradcam_elementwise
from vitviz.explain.gradcam_plusplus import gradcam_plus_plus
from vitviz.explain.hirescam import hires_cam
from vitviz.explain.layercam import layer_cam
from vitviz.explain.methods import get_method
from vitviz.explain.scorecam import score_cam
from vitviz.explain.xgradcam import xgrad_cam
from vitviz.pipeline.analysis import analyze

GRADIENT_CAMS = {
    "gradcam": grad_cam,
    "hirescam": hires_cam,
    "gradcam-plusplus": gradcam_plus_plus,
    "xgradcam": xgrad_cam,
    "layercam": layer_cam,
    "gradcam-elementwise": gradcam_elementwise,
    "eigen-gradcam": eigen_grad_cam,
}
ALL = (*GRADIENT_CAMS, "eigencam", "scorecam", "ablationcam")
LAYERS = ("-1.norm1", "0.norm2", "1.output", "0")


@pytest.fixture(scope="module")
def cases(tmp_path_factory) -> dict[str, tuple[nn.Module, object, Tensor]]:
    """{"vit" | "swin": (timm model, vitviz's LoadedModel of its files, image (3, H, W))}."""
    root = tmp_path_factory.mktemp("cams")
    args = dict(img_size=(32, 48), patch_size=8, embed_dim=32, depth=2, num_heads=4, reg_tokens=2)
    torch.manual_seed(0)
    vit = randomize_(timm.create_model("vit_tiny_patch16_224", num_classes=5, **args), seed=1)
    save_for_hf(vit, root / "vit", model_args=args, safe_serialization=True)
    swin = tiny_timm_swin((32, 32), window=4, seed=2).eval()
    (root / "swin").mkdir()
    save_file({k: v.contiguous() for k, v in swin.state_dict().items()},
              str(root / "swin" / "model.safetensors"))  # fmt: skip
    (root / "vit.vitviz.json").write_text(json.dumps({}))
    return {
        "vit": (vit.eval(), load_checkpoint(root / "vit"), images(1, 32, 48, seed=3)[0]),
        "swin": (swin, load_checkpoint(root / "swin" / "model.safetensors"),
                 images(1, 32, 32, seed=4)[0]),
    }  # fmt: skip


# -- the float64 reference, from the definitions ------------------------------------------------


def _module(model: nn.Module, layer: str) -> nn.Module:
    block, _, part = layer.partition(".")
    b = model.blocks[int(block)]
    return b if part in ("", "output") else getattr(b, part)


def _on_grid(name: str, tokens: Tensor, model: nn.Module, x: Tensor) -> Tensor:
    """The reference's own layout: a ViT's (B, P + h·w, C) after its P prefix tokens on the
    patch grid; a Swin's (B, H, W, C) maps."""
    if name == "swin":
        return tokens.permute(0, 3, 1, 2)
    P = int(model.num_prefix_tokens)
    h, w = x.shape[-2] // 8, x.shape[-1] // 8
    return tokens[:, P:].transpose(1, 2).reshape(tokens.shape[0], -1, h, w)


def _features(name: str, model: nn.Module, x: Tensor, layer: str, c: int):
    """(A (C, h, w), G (C, h, w), logit) in the model's dtype by the test's own hook."""
    seen: list[Tensor] = []

    def keep(_m, _a, out):
        seen.append(out[0] if isinstance(out, tuple) else out)

    handle = _module(model, layer).register_forward_hook(keep)
    try:
        logits = model(x)
        y = logits[0, c]
        (g,) = torch.autograd.grad(y, seen[0])
    finally:
        handle.remove()
    return (_on_grid(name, seen[0].detach(), model, x)[0], _on_grid(name, g, model, x)[0],
            float(y.detach()))  # fmt: skip


def _scaled(cam: np.ndarray) -> np.ndarray:
    cam = cam - cam.min()
    return cam / cam.max() if cam.max() > 0 else cam


def _relu(v: np.ndarray) -> np.ndarray:
    return np.maximum(v, 0)


def _pc1(x: np.ndarray) -> np.ndarray:
    """(C, h, w) -> the centred (h·w, C) projected on its first right singular vector, the
    largest |value| positive, (h, w)."""
    C, h, w = x.shape
    m = x.reshape(C, -1).T
    m = m - m.mean(axis=0)
    _, _, vt = np.linalg.svd(m, full_matrices=False)
    p = m @ vt[0]
    if p[np.argmax(np.abs(p))] < 0:
        p = -p
    return p.reshape(h, w)


def reference_gradient_cam(method: str, A: np.ndarray, G: np.ndarray) -> np.ndarray:
    """Each definition with a loop over the channels k, A and G (C, h, w) float64."""
    C = A.shape[0]
    cam = np.zeros(A.shape[1:])
    if method == "eigen-gradcam":
        return _scaled(_relu(_pc1(G * A)))
    for k in range(C):
        a, g = A[k], G[k]
        if method == "gradcam":
            cam += g.mean() * a
        elif method == "hirescam":
            cam += g * a
        elif method == "gradcam-elementwise":
            cam += _relu(g * a)
        elif method == "layercam":
            cam += _relu(g) * a
        elif method == "xgradcam":
            cam += (g * a).sum() / (a.sum() + 1e-7) * a
        elif method == "gradcam-plusplus":
            alpha = np.zeros_like(g)
            for i, j in np.ndindex(*g.shape):
                if g[i, j] != 0:
                    alpha[i, j] = g[i, j] ** 2 / (2 * g[i, j] ** 2 + a.sum() * g[i, j] ** 3 + 1e-6)
            cam += (alpha * _relu(g)).sum() * a
    return _scaled(_relu(cam))


def reference_scorecam(model: nn.Module, x: Tensor, A: Tensor, c: int) -> np.ndarray:
    cam = torch.zeros(A.shape[1:], dtype=torch.float64)
    for k in range(A.shape[0]):
        up = F.interpolate(A[k][None, None], size=x.shape[-2:], mode="bilinear",
                           align_corners=True)[0, 0]  # fmt: skip
        span = up.max() - up.min()
        mask = (up - up.min()) / span if span > 0 else torch.zeros_like(up)
        with torch.no_grad():
            p = model(x * mask).softmax(-1)[0, c]
        cam += p * A[k]
    return _scaled(_relu(cam.numpy()))


def reference_ablationcam(model: nn.Module, x: Tensor, layer: str, A: Tensor, c: int,
                          y: float) -> np.ndarray:  # fmt: skip
    cam = torch.zeros(A.shape[1:], dtype=torch.float64)
    for k in range(A.shape[0]):

        def zero(_m, _a, out, k=k):
            t = (out[0] if isinstance(out, tuple) else out).clone()
            t[..., k] = 0
            return (t, *out[1:]) if isinstance(out, tuple) else t

        handle = _module(model, layer).register_forward_hook(zero)
        try:
            with torch.no_grad():
                yk = float(model(x)[0, c])
        finally:
            handle.remove()
        cam += (y - yk) / y * A[k]
    return _scaled(_relu(cam.numpy()))


def _float64(loaded) -> nn.Module:
    return copy.deepcopy(loaded.model).double().eval()


@pytest.mark.parametrize("name", ["vit", "swin"])
def test_each_cam_equals_its_definition_in_float64(cases, name) -> None:
    _, loaded, image = cases[name]
    model = _float64(loaded)
    kind = loaded.kind
    x = image[None].double()
    c = 2
    for layer in LAYERS:
        A, G, y = _features(name, model, x, layer, c)
        lp = layer_pass(kind, model, x, layer, c)
        torch.testing.assert_close(lp.activations[0], A, rtol=0, atol=1e-12)
        torch.testing.assert_close(lp.gradients[0], G, rtol=0, atol=1e-12)
        for method, formula in GRADIENT_CAMS.items():
            want = reference_gradient_cam(method, A.numpy(), G.numpy())
            got = formula(lp.activations, lp.gradients)[0].numpy()
            np.testing.assert_allclose(_scaled(got), want, atol=1e-9, err_msg=f"{method} {layer}")
        got = eigen_cam(lp.activations)[0].numpy()
        np.testing.assert_allclose(_scaled(got), _scaled(_relu(_pc1(A.numpy()))), atol=1e-9)
    for layer in ("-1.norm1", "0.output"):
        A, _, y = _features(name, model, x, layer, c)
        got = score_cam(kind, model, x, layer, c).numpy()
        np.testing.assert_allclose(_scaled(got), reference_scorecam(model, x, A, c), atol=1e-9)
        got = ablation_cam(kind, model, x, layer, c).numpy()
        want = reference_ablationcam(model, x, layer, A, c, y)
        np.testing.assert_allclose(_scaled(got), want, atol=1e-9, err_msg=f"ablation {layer}")


@pytest.mark.parametrize("name", ["vit", "swin"])
def test_the_tables_maps_are_the_definitions_on_the_chosen_layer(cases, name) -> None:
    _, loaded, image = cases[name]
    a = analyze(loaded, image)
    model = _float64(loaded)
    x = image[None].double()
    c = int(a.top_class)
    for layer in ("-1.norm1", "0.norm2"):
        A, G, y = _features(name, model, x, layer, c)
        for method in ALL:
            got = get_method(method)(a, None, None, {"layer": layer})
            assert tuple(got.shape) == tuple(A.shape[1:]) and got.dtype == torch.float32
            if method in GRADIENT_CAMS:
                want = reference_gradient_cam(method, A.numpy(), G.numpy())
            elif method == "eigencam":
                want = _scaled(_relu(_pc1(A.numpy())))
            elif method == "scorecam":
                want = reference_scorecam(model, x, A, c)
            else:
                want = reference_ablationcam(model, x, layer, A, c, y)
            np.testing.assert_allclose(got.numpy(), want, atol=2e-4, err_msg=f"{method} {layer}")


def test_the_default_layer_is_token_gradcams(cases) -> None:
    """Grad-CAM without a layer is today's token Grad-CAM: the last block's norm1."""
    _, loaded, image = cases["vit"]
    a = analyze(loaded, image)
    want = token_gradcam(loaded.model, image[None], int(a.top_class))[0]
    torch.testing.assert_close(get_method("gradcam")(a), want, rtol=0, atol=1e-6)
    torch.testing.assert_close(get_method("gradcam")(a, params={"layer": "-1.norm1"}), want,
                               rtol=0, atol=1e-6)  # fmt: skip


def test_a_bad_layer_is_refused_with_the_accepted_forms(cases) -> None:
    _, loaded, image = cases["vit"]
    a = analyze(loaded, image)
    with pytest.raises(ValueError, match=r"BLOCK\.PART.*norm1, norm2, output"):
        get_method("layercam")(a, params={"layer": "1.norm3"})
    with pytest.raises(ValueError, match=r"block 7 is out of range.*0–1"):
        get_method("layercam")(a, params={"layer": "7.norm1"})


def test_batched_cams_report_progress_and_cancel(cases) -> None:
    _, loaded, image = cases["vit"]
    model, x = loaded.model, image[None]
    seen: list[tuple[int, int]] = []
    with reporting(lambda done, total: seen.append((done, total))):
        score_cam(loaded.kind, model, x, "-1.norm1", 1)
    C = 32
    assert seen[0] == (0, C) and seen[-1] == (C, C)
    assert [d for d, _ in seen[1:]] == [*range(CAM_BATCH, C, CAM_BATCH), C]
    calls = []
    stop = reporting(cancelled=lambda: calls.append(1) or len(calls) > 1)
    with stop, pytest.raises(CamCancelledError, match="after 16 of 32"):
        ablation_cam(loaded.kind, model, x, "-1.norm1", 1)


# -- pytorch-grad-cam -------------------------------------------------------------------------

LIBRARY_CAMS = {
    "gradcam": "GradCAM",
    "hirescam": "HiResCAM",
    "gradcam-plusplus": "GradCAMPlusPlus",
    "xgradcam": "XGradCAM",
    "layercam": "LayerCAM",
    "gradcam-elementwise": "GradCAMElementWise",
    "eigen-gradcam": "EigenGradCAM",
    "eigencam": "EigenCAM",
    "scorecam": "ScoreCAM",
    "ablationcam": "AblationCAM",
}
# the library's layers named as vitviz's: (vitviz layer, the library's module)
LIBRARY_LAYERS = {
    "vit": {"-1.norm1": lambda m: m.blocks[-1].norm1, "0.norm2": lambda m: m.blocks[0].norm2},
    "swin": {
        "-1.norm1": lambda m: m.layers[-1].blocks[-1].norm1,
        "1.norm2": lambda m: m.layers[0].blocks[1].norm2,
    },
}


def _library_map(name: str, library: nn.Module, method: str, layer: nn.Module, x: Tensor,
                 c: int) -> np.ndarray:  # fmt: skip
    import pytorch_grad_cam
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

    P = int(getattr(library, "num_prefix_tokens", 0))
    h, w = x.shape[-2] // 8, x.shape[-1] // 8

    def reshape(t: Tensor) -> Tensor:  # to (B, C, h, w), the prefix read from the model
        if t.ndim == 4:  # a Swin's (B, H, W, C)
            return t.permute(0, 3, 1, 2)
        if name == "swin":  # timm's Swin norm2 reads (B, H·W, C): the first stage's here
            return t.transpose(1, 2).reshape(t.shape[0], -1, x.shape[-2] // 4, x.shape[-1] // 4)
        return t[:, P:].transpose(1, 2).reshape(t.shape[0], -1, h, w)

    extra = {"ablation_layer": _zeroing_layer(), "batch_size": CAM_BATCH} if (
        method == "ablationcam") else {}  # fmt: skip
    cam = getattr(pytorch_grad_cam, LIBRARY_CAMS[method])(
        model=library, target_layers=[layer], reshape_transform=reshape, **extra
    )
    cam.get_target_width_height = lambda _x: None  # the map on the layer's grid, not resized
    # Score-CAM softmaxes the channels' target values: with log p_c those weights are
    # p_c,k / Σ_k p_c,k, the definition's weights times one positive number
    target = (lambda out: torch.log_softmax(out, -1)[c]) if method == "scorecam" else (
        ClassifierOutputTarget(c))  # fmt: skip
    if method == "scorecam":
        cam.batch_size = CAM_BATCH
    return cam(input_tensor=x, targets=[target])[0]


def _zeroing_layer() -> nn.Module:
    """pytorch-grad-cam's own ablation layer for token layers, configured as the paper ablates:
    the channel set to 0 at every token. The library's default sets it to (the layer's minimum
    − 10⁷) wherever that minimum is not 0 (any LayerNorm's or block's output), so its default
    weights are not the definition's; its ``ablation_layer`` argument is how its API lets the
    value be chosen."""
    from pytorch_grad_cam.ablation_layer import AblationLayerVit

    class Zeroing(AblationLayerVit):
        def __call__(self, x: Tensor) -> Tensor:
            out = self.activations.transpose(1, self.activations.ndim - 1)  # channels at 1
            for i in range(out.shape[0]):
                out[i, int(self.indices[i])] = 0
            return out.transpose(1, out.ndim - 1)

    return Zeroing()


@pytest.mark.parametrize("name", ["vit", "swin"])
def test_each_cam_equals_pytorch_grad_cams(cases, name) -> None:
    pytest.importorskip("pytorch_grad_cam", reason="the grad-cam package is not installed")
    library, loaded, image = cases[name]
    a = analyze(loaded, image)
    c = int(a.top_class)
    for layer, module in LIBRARY_LAYERS[name].items():
        for method in LIBRARY_CAMS:
            want = _library_map(name, library, method, module(library), image[None], c)
            got = get_method(method)(a, None, c, {"layer": layer}).numpy()
            if method in ("eigencam", "eigen-gradcam"):  # the library leaves the sign as SVD
                flipped = _flipped(method, loaded, image, layer, c)  # gives it
                if not np.allclose(got, want, atol=1e-4):
                    got = flipped
            np.testing.assert_allclose(got, want, atol=1e-4, err_msg=f"{method} {layer}")


def _flipped(method: str, loaded, image: Tensor, layer: str, c: int) -> np.ndarray:
    """The eigen map with the other sign of the component."""
    from vitviz.explain.eigencam import first_component

    lp = layer_pass(loaded.kind, loaded.model, image[None], layer, c)
    x = lp.activations if method == "eigencam" else lp.activations * lp.gradients
    return _scaled(_relu(-first_component(x.double())[0].numpy()))


def test_the_table_states_each_cams_cost() -> None:
    from vitviz.cli.methods import methods_markdown
    from vitviz.explain.methods import all_methods

    rows = {line.split("|")[1].strip(" `"): line for line in
            methods_markdown(all_methods()).splitlines()[2:]}  # fmt: skip
    for name in ("scorecam", "ablationcam"):
        assert "| 1 + C forward passes (C its layer's channels), 16 at a time |" in rows[name]
    for name in GRADIENT_CAMS:
        assert "| 1 forward, 1 backward pass to its layer |" in rows[name]
    assert "| 1 forward pass |" in rows["eigencam"]


def test_eigencam_needs_no_head_and_the_gradient_cams_say_they_do() -> None:
    from conftest import random_vit

    from vitviz.kinds.vit import KIND as VIT

    model, x = random_vit(0, num_classes=0), images(1, 32, 32, seed=6)
    lp = layer_pass(VIT, model, x, "auto", gradients=False)
    assert tuple(eigen_cam(lp.activations).shape) == (1, 4, 4) and lp.target.tolist() == [-1]
    with pytest.raises(ValueError, match="needs a class score, and this model has no head"):
        layer_pass(VIT, model, x, "auto")


def test_the_table_says_what_each_cam_needs() -> None:
    """Score-CAM and Ablation-CAM score a class with forward passes (a head and the model, no
    gradient), Eigen-CAM runs one forward pass (the model, no head): the table, its markdown,
    the refusals and the window's method data say so; only the gradient CAMs make the window
    keep gradients."""
    from conftest import random_vit

    from vitviz.cli.methods import methods_markdown
    from vitviz.explain.methods import all_methods
    from vitviz.kinds.vit import KIND as VIT
    from vitviz.workers.jobs import method_table

    table = {m.name: m for m in all_methods()}
    needs = {n: (table[n].needs_gradients, table[n].needs_head, table[n].needs_model) for n in ALL}
    assert needs == {
        **{n: (True, True, True) for n in GRADIENT_CAMS},
        "eigencam": (False, False, True),
        "scorecam": (False, True, True),
        "ablationcam": (False, True, True),
    }
    rows = {line.split("|")[1].strip(" `"): line.split("|")[4].strip() for line in
            methods_markdown(all_methods()).splitlines()[2:]}  # fmt: skip
    assert rows["scorecam"] == rows["ablationcam"] == "head + model, no gradients"
    assert rows["eigencam"] == "model, no head, no gradients"
    assert {rows[n] for n in GRADIENT_CAMS} == {"gradients"}
    headless = random_vit(0, num_classes=0)
    for name in ("scorecam", "ablationcam"):
        said = table[name].unavailable_on(headless, False, kind=VIT)
        assert said == f"{table[name].label} needs a classification head, and this model has none"
    assert table["eigencam"].unavailable_on(headless, False, kind=VIT) is None
    for name in ("eigencam", "scorecam", "ablationcam"):
        said = table[name].unavailable_on(None, True, kind=VIT)
        assert said == f"{table[name].label} needs the model itself for its forward passes"
    info = {m.name: m for m in method_table()}
    assert [n for n in ALL if info[n].needs_gradients] == list(GRADIENT_CAMS)
    assert [n for n in ALL if info[n].needs_head] == [*GRADIENT_CAMS, "scorecam", "ablationcam"]
