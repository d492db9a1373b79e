"""The CAM family's A and G (DESIGN §5: a layer's tokens on its block's grid, G = ∂y_c/∂A) on
the pyramids, whose tokens lie otherwise than a ViT's: timm's PVT v2 (row-major tokens per
stage) and Hiera (unrolled mask-unit order, undone here by timm's own ``reroll``; a pooling
block's norm1 on the stage before's grid; the default layer the last block's norm2). The
test's own hooks on timm's modules give A and G; Grad-CAM, HiResCAM and LayerCAM, written out
here, equal the table's maps on several layers."""

from __future__ import annotations

import json
import math

import pytest
import timm
import torch
from timm.models import save_for_hf
from torch import Tensor, nn
from zoo_helpers import images, randomize_

from vitviz.checkpoints import load_checkpoint
from vitviz.explain.methods import get_method
from vitviz.pipeline.analysis import analyze

SIZE = 96  # the last stages' grids 3 × 3: room for a map the ReLU leaves non-zero


def _pvt() -> nn.Module:
    model = timm.create_model(
        "pvt_v2_b0", num_classes=5, embed_dims=(16, 32, 48, 64), num_heads=(1, 2, 2, 4),
        mlp_ratios=(2, 2, 2, 2), depths=(1, 2, 1, 1),
    )  # fmt: skip
    return randomize_(model, seed=31)


def _hiera() -> nn.Module:
    model = timm.create_model(
        "hiera_tiny_224", img_size=(SIZE, SIZE), embed_dim=16, num_heads=1,
        stages=(1, 2, 1, 1), num_classes=5,
    )  # fmt: skip
    return randomize_(model, seed=32)


def _blocks(name: str, model: nn.Module) -> list[nn.Module]:
    if name == "pvt":
        return [b for stage in model.stages for b in stage.blocks]
    return list(model.blocks)


@pytest.fixture(scope="module", params=["pvt", "hiera"])
def case(request, tmp_path_factory):
    """(name, timm model float64, vitviz analysis, image (1, 3, H, W) float64)."""
    return _opened(request.param, tmp_path_factory)


@pytest.fixture(scope="module")
def pvt(tmp_path_factory):
    return _opened("pvt", tmp_path_factory)


def _opened(name: str, tmp_path_factory):
    torch.manual_seed(0)
    model = _pvt() if name == "pvt" else _hiera()
    root = tmp_path_factory.mktemp(name)
    save_for_hf(model, root / name, safe_serialization=True)
    side = {"preprocessing": {"image_size": [SIZE, SIZE]}}
    (root / f"{name}.vitviz.json").write_text(json.dumps(side))
    analysis = analyze(load_checkpoint(root / name), images(1, SIZE, SIZE, seed=8)[0])
    return name, model.double().eval(), analysis, analysis.input[None].double()


def _on_grid(name: str, model: nn.Module, t: Tensor, block: int, part: str) -> Tensor:
    """(1, N, C) tokens -> (C, h, w): row-major on a square stage grid (PVT v2), or timm's
    reroll of the block whose output order they have (Hiera: a norm1 reads the block before's)."""
    if name == "pvt":
        side = math.isqrt(t.shape[1])
        return t[0].T.reshape(-1, side, side)
    order_of = block - 1 if part == "norm1" and block > 0 else block
    return model.reroll(t, order_of)[0].permute(2, 0, 1)  # (B, H, W, C) -> (C, H, W)


def _a_and_g(name: str, model: nn.Module, x: Tensor, block: int, part: str, c: int):
    blocks = _blocks(name, model)
    module = blocks[block] if part == "output" else getattr(blocks[block], part)
    seen: list[Tensor] = []
    handle = module.register_forward_hook(lambda _m, _a, out: seen.append(out))
    try:
        with torch.enable_grad():
            y = model(x)[0, c]
            (g,) = torch.autograd.grad(y, seen[0])
    finally:
        handle.remove()
    index = block % len(blocks)
    return (_on_grid(name, model, seen[0].detach(), index, part),
            _on_grid(name, model, g, index, part))  # fmt: skip


def _min_max(m: Tensor) -> Tensor:
    """Scaled to [0, 1]; a constant map is all zero."""
    span = m.max() - m.min()
    return (m - m.min()) / span if span > 0 else torch.zeros_like(m)


DEFINITIONS = {
    "gradcam": lambda A, G: (G.mean(dim=(1, 2))[:, None, None] * A).sum(0).clamp_min(0),
    "hirescam": lambda A, G: (G * A).sum(0).clamp_min(0),
    "layercam": lambda A, G: (G.clamp_min(0) * A).sum(0).clamp_min(0),
}


@pytest.mark.parametrize(
    ("layer", "block", "part"),
    [("auto", -1, None), ("0.norm1", 0, "norm1"), ("1.norm1", 1, "norm1"),
     ("2.norm2", 2, "norm2"), ("-1.output", -1, "output")],
)  # fmt: skip
def test_the_cams_read_the_layers_tokens_on_its_grid(case, layer, block, part) -> None:
    name, model, analysis, x = case
    if part is None:  # the default: the last block's norm1, a Hiera's norm2
        part = "norm2" if name == "hiera" else "norm1"
    c = int(analysis.logits.argmin())  # not the top class: the target is really used
    A, G = _a_and_g(name, model, x, block, part, c)
    shown = 0
    for method, definition in DEFINITIONS.items():
        want = _min_max(definition(A, G))
        got = get_method(method)(analysis, None, c, {"layer": layer})
        assert got.shape == want.shape, (method, layer)
        err = float((got.double() - want).abs().max())
        assert err < 1e-4, (method, layer, err)
        shown += int(float(want.max()) == 1.0)
    assert shown >= 1, layer  # not only constant maps: the comparison can fail
    # the layout matters: a map of the same tokens laid out naively (PVT v2's grid read
    # column-major, Hiera's unrolled order read row-major) is another map
    if name == "pvt":
        naive = A.transpose(1, 2)
        naive_g = G.transpose(1, 2)
    else:
        naive = _unrolled(model, x, block, part, A.shape)
        naive_g = _unrolled(model, x, block, part, G.shape, c)
    if not torch.equal(naive, A):  # a Hiera's last stages are in spatial order already
        changed = [
            float((_min_max(d(naive, naive_g)) - _min_max(d(A, G))).abs().max()) > 1e-2
            for d in DEFINITIONS.values()
        ]
        assert any(changed), layer  # a map changes with the layout: the layout is checked


def _unrolled(model, x, block, part, shape, c=None) -> Tensor:
    """The hooked tokens (or, with a class, their gradient) in timm's unrolled order, read
    row-major onto (C, h, w): the layout vitviz must undo."""
    blocks = _blocks("hiera", model)
    module = blocks[block] if part == "output" else getattr(blocks[block], part)
    seen: list[Tensor] = []
    handle = module.register_forward_hook(lambda _m, _a, out: seen.append(out))
    try:
        with torch.enable_grad():
            y = model(x)[0, 0 if c is None else c]
            t = seen[0] if c is None else torch.autograd.grad(y, seen[0])[0]
    finally:
        handle.remove()
    return t[0].detach().T.reshape(shape)


def test_hirescam_of_tokens_only_a_layernorm_reads_is_zero(pvt) -> None:
    """A PVT v2's last block output goes to its stage's LayerNorm alone, which is blind to each
    token's scale and mean: Σ_k G_k A_k = 0 at every token (up to the norm's ε; float64: about
    1e-7 of Σ_k |G_k A_k|). The definition's map is then constant, 0 after min-max scaling;
    the float32 pass's rounding, stretched to [0, 1], is not shown as a map."""
    name, model, analysis, x = pvt
    c = int(analysis.logits.argmin())
    A, G = _a_and_g(name, model, x, -1, "output", c)
    terms = G * A
    assert float(terms.sum(0).abs().max()) < 1e-6 * float(terms.abs().sum(0).max())
    got = get_method("hirescam")(analysis, None, c, {"layer": "-1.output"})
    assert float(got.abs().max()) == 0.0


def test_a_layer_without_the_grid_tokens_is_refused_in_one_line(tmp_path) -> None:
    """A CaiT's class-attention block's norm2 reads the CLS alone: no map of the patches; the
    message names the layer and what to pick, and its norm1 gives a map."""
    args = dict(img_size=32, patch_size=8, embed_dim=32, depth=2, depth_token_only=2,
                num_heads=4)  # fmt: skip
    torch.manual_seed(0)
    model = randomize_(timm.create_model("cait_xxs24_224", num_classes=5, **args), seed=33)
    torch.save(model.state_dict(), tmp_path / "cait.pth")
    analysis = analyze(load_checkpoint(tmp_path / "cait.pth"), images(1, 32, 32, seed=2)[0])
    for method in ("hirescam", "gradcam"):
        with pytest.raises(ValueError, match=r"^layer 3\.norm2 gives 1 token\(s\), not its"):
            get_method(method)(analysis, None, None, {"layer": "3.norm2"})
        assert get_method(method)(analysis, None, None, {"layer": "3.norm1"}).shape == (4, 4)
