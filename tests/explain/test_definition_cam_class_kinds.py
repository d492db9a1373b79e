"""The CAM family's A and G (DESIGN §5) on the kinds whose CLS joins late, CaiT (self-attention
blocks over the patches, then class-attention blocks over [CLS, patches]), XCiT (XCA blocks,
then class-attention blocks) and ConViT (GPSA blocks over the patches, then self-attention
over [CLS, patches]): vitviz's own networks, opened from perturbed timm checkpoints,
against the test's hooks on timm's modules of the same name (the patch tokens, row-major on
the grid, the CLS left out). Grad-CAM, HiResCAM and LayerCAM are written out here."""

from __future__ import annotations

import pytest
import timm
import torch
from torch import Tensor, nn
from zoo_helpers import images, randomize_

from vitviz.checkpoints import load_checkpoint
from vitviz.explain.methods import get_method
from vitviz.pipeline.analysis import analyze

SIDE, GRID = 32, (4, 4)


def _cait() -> nn.Module:
    args = dict(img_size=SIDE, patch_size=8, embed_dim=32, depth=2, depth_token_only=2,
                num_heads=4)  # fmt: skip
    return randomize_(timm.create_model("cait_xxs24_224", num_classes=5, **args), seed=41)


def _xcit() -> nn.Module:
    args = dict(img_size=SIDE, embed_dim=32, depth=2, cls_attn_layers=2, num_heads=4)
    model = randomize_(timm.create_model("xcit_tiny_12_p8_224", num_classes=5, **args), seed=42)
    g = torch.Generator().manual_seed(42)
    for m in model.modules():  # BatchNorm statistics that are not the identity's
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(0.2 * torch.randn(m.running_mean.shape, generator=g))
            m.running_var.copy_(0.5 + torch.rand(m.running_var.shape, generator=g))
    return model


def _convit() -> nn.Module:
    args = dict(img_size=SIDE, patch_size=8, embed_dim=8, depth=3, local_up_to_layer=2,
                num_heads=4)  # fmt: skip
    model = randomize_(timm.create_model("convit_tiny", num_classes=5, **args), seed=43)
    with torch.no_grad():  # gates spread over both sides: content and position both count
        for block in model.blocks[:2]:
            block.attn.gating_param.copy_(torch.tensor([-2.0, -0.5, 0.5, 2.0]))
    return model


BUILD = {"cait": _cait, "xcit": _xcit, "convit": _convit}


def _timm_blocks(name: str, model: nn.Module) -> list[nn.Module]:
    """timm's blocks in vitviz's order: the patch blocks, then the class-attention blocks."""
    if name == "cait":
        return [*model.blocks, *model.blocks_token_only]
    if name == "xcit":
        return [*model.blocks, *model.cls_attn_blocks]
    return list(model.blocks)


@pytest.fixture(scope="module", params=list(BUILD))
def case(request, tmp_path_factory):
    name = request.param
    torch.manual_seed(0)
    model = BUILD[name]()
    path = tmp_path_factory.mktemp(name) / f"{name}.pth"
    torch.save(model.state_dict(), path)
    config = {"image_size": SIDE} if name == "xcit" else None
    analysis = analyze(load_checkpoint(path, config=config), images(1, SIDE, SIDE, seed=4)[0])
    return name, model.double().eval(), analysis, analysis.input[None].double()


def _a_and_g(name: str, model: nn.Module, x: Tensor, module: nn.Module, c: int):
    """The module's output's last h·w tokens (the patches) on the grid, and ∂y_c/∂ them:
    (C, h, w) each."""
    seen: list[Tensor] = []
    handle = module.register_forward_hook(lambda _m, _a, out: seen.append(out))
    try:
        with torch.enable_grad():
            y = model(x)[0, c]
            (g,) = torch.autograd.grad(y, seen[0])
    finally:
        handle.remove()

    def on_grid(t: Tensor) -> Tensor:
        return t[0, -GRID[0] * GRID[1] :].T.reshape(-1, *GRID)

    return on_grid(seen[0].detach()), on_grid(g)


def _min_max(m: Tensor) -> Tensor:
    span = m.max() - m.min()
    return (m - m.min()) / span if span > 0 else torch.zeros_like(m)


DEFINITIONS = {
    "gradcam": lambda A, G: (G.mean(dim=(1, 2))[:, None, None] * A).sum(0).clamp_min(0),
    "hirescam": lambda A, G: (G * A).sum(0).clamp_min(0),
    "layercam": lambda A, G: (G.clamp_min(0) * A).sum(0).clamp_min(0),
}

# (vitviz layer, its block, its part): the patch blocks' parts and a class block's norm1 (its
# patch tokens are the keys and values the CLS attends to)
LAYERS = [("0.norm1", 0, "norm1"), ("1.norm2", 1, "norm2"), ("0.output", 0, None),
          ("2.norm1", 2, "norm1"), ("-1.norm1", -1, "norm1")]  # fmt: skip


@pytest.mark.parametrize(("layer", "block", "part"), LAYERS)
def test_the_cams_read_the_patch_tokens_of_the_layer(case, layer, block, part) -> None:
    name, model, analysis, x = case
    b = _timm_blocks(name, model)[block]
    module = b if part is None else getattr(b, part)
    shown = 0
    for c in (int(analysis.logits.argmin()), int(analysis.logits.argmax())):
        A, G = _a_and_g(name, model, x, module, c)
        for method, definition in DEFINITIONS.items():
            want = _min_max(definition(A, G))
            got = get_method(method)(analysis, None, c, {"layer": layer})
            err = float((got.double() - want).abs().max())
            assert err < 1e-4, (method, layer, c, err)
            shown += int(float(want.max()) == 1.0)
    assert shown >= 2, layer  # not only constant maps: the comparison can fail
