"""Relevance (Chefer et al. 2021) from DESIGN §5, and G_l = ∂y_c/∂A_l paired with its own layer."""

from __future__ import annotations

import pytest
import torch
from loop_math import matmul
from torch import nn

from vitviz.blocks import VisionTransformer, ViTConfig
from vitviz.blocks.layers import LayerScale
from vitviz.explain import (
    attention_gradients,
    gradient_rollout,
    query_token,
    relevance,
    relevance_row,
)

B, L, H = 2, 4, 3
GRID = (3, 5)
P = GRID[0] * GRID[1]


# -- reference (plain Python floats, loops, full matrices) --------------------------------------


def ref_abar(A, G):
    """mean_h((G ⊙ A)⁺) for one image: H × N × N lists -> N × N."""
    Hn, N = len(A), len(A[0])
    return [
        [sum(max(0.0, G[h][i][j] * A[h][i][j]) for h in range(Hn)) / Hn for j in range(N)]
        for i in range(N)
    ]


def ref_relevance_matrix(A_layers, G_layers, start):
    """R = I; for l = s..L: R = R + Ā_l·R."""
    N = len(A_layers[0][0])
    R = [[1.0 if i == j else 0.0 for j in range(N)] for i in range(N)]
    for A, G in zip(A_layers[start:], G_layers[start:], strict=True):
        AR = matmul(ref_abar(A, G), R)
        R = [[R[i][j] + AR[i][j] for j in range(N)] for i in range(N)]
    return R


def ref_min_max(values):
    lo, hi = min(values), max(values)
    return [(v - lo) / (hi - lo) for v in values]


def ref_relevance_maps(attn, grads, num_prefix, query, start, grid):
    """(B, gh, gw) tensor of R[q, patches], min-max scaled, plus the full rows R[q, :]."""
    gh, gw = grid
    maps, rows = [], []
    for b in range(attn[0].shape[0]):
        R = ref_relevance_matrix(
            [a[b].tolist() for a in attn], [g[b].tolist() for g in grads], start
        )
        rows.append(R[query])
        m = ref_min_max(R[query][num_prefix:])
        maps.append([[m[r * gw + c] for c in range(gw)] for r in range(gh)])
    return torch.tensor(maps, dtype=torch.float64), torch.tensor(rows, dtype=torch.float64)


def random_inputs(num_prefix, seed):
    N = num_prefix + P
    g = torch.Generator().manual_seed(seed)
    attn = [
        torch.softmax(2 * torch.randn(B, H, N, N, generator=g, dtype=torch.float64), dim=-1)
        for _ in range(L)
    ]
    grads = [torch.randn(B, H, N, N, generator=g, dtype=torch.float64) for _ in range(L)]
    return attn, grads


@pytest.mark.parametrize("num_prefix", [1, 3])
@pytest.mark.parametrize("start", [0, 2])
@pytest.mark.parametrize("query_kind", ["cls", "patch"])
def test_relevance_matches_reference(num_prefix, start, query_kind):
    q = 0 if query_kind == "cls" else query_token((2, 1), GRID, num_prefix)
    attn, grads = random_inputs(num_prefix, seed=num_prefix + 10 * start)
    got = relevance(attn, grads, GRID, num_prefix, query=q, start_layer=start)
    row = relevance_row(attn, grads, query=q, num_prefix=num_prefix, start_layer=start)
    ref, ref_rows = ref_relevance_maps(attn, grads, num_prefix, q, start, GRID)
    assert got.shape == (B, *GRID)
    assert torch.allclose(got, ref, atol=1e-12, rtol=1e-10)
    assert torch.allclose(row, ref_rows, atol=1e-12, rtol=1e-10)
    flat = got.flatten(1)
    assert torch.allclose(flat.amin(1), torch.zeros(B, dtype=torch.float64))
    assert torch.allclose(flat.amax(1), torch.ones(B, dtype=torch.float64))
    # Pairing matters for this data: reversed gradients give another map.
    wrong, _ = ref_relevance_maps(attn, grads[::-1], num_prefix, q, start, GRID)
    assert not torch.allclose(got, wrong, atol=1e-6)


def test_relevance_refuses_mismatched_inputs():
    attn, grads = random_inputs(1, seed=3)
    with pytest.raises(ValueError):
        relevance(attn, grads[1:], GRID, 1)
    with pytest.raises(ValueError):
        relevance(attn, [g[:, :1] for g in grads], GRID, 1)
    with pytest.raises(ValueError):
        relevance(attn, grads, GRID, 1, start_layer=-1)


# -- gradients on a real model ------------------------------------------------------------------

CFG = ViTConfig(
    image_size=(24, 32),
    patch_size=8,
    num_classes=5,
    dim=32,
    depth=3,
    heads=4,
    num_register_tokens=1,
    layer_scale_init=0.5,
)


def make_model(config: ViTConfig = CFG, seed: int = 0) -> VisionTransformer:
    torch.manual_seed(seed)
    model = VisionTransformer(config)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            for name, p in module.named_parameters(recurse=False):
                offset = 0.0
                if isinstance(module, nn.LayerNorm) and name == "weight":
                    offset = 1.0
                if isinstance(module, LayerScale):
                    offset = 0.5
                p.copy_(offset + 0.3 * torch.randn(p.shape, generator=g))
    return model.eval().double()


def images(b=2, h=24, w=32, seed=0):
    g = torch.Generator().manual_seed(100 + seed)
    return torch.randn(b, 3, h, w, generator=g, dtype=torch.float64)


class AddToAttention(nn.Module):
    """Stands in for a block's attn_drop: the attention actually used becomes A_l + delta."""

    def __init__(self, delta: torch.Tensor) -> None:
        super().__init__()
        self.delta = delta

    def forward(self, a: torch.Tensor) -> torch.Tensor:
        return a + self.delta


def logit_with_perturbation(model, x, layer, delta, target):
    block = model.blocks[layer]
    saved = block.attn.attn_drop
    block.attn.attn_drop = AddToAttention(delta)
    try:
        logits = model.forward_explained(x, capture_attention=True).logits
    finally:
        block.attn.attn_drop = saved
    return logits.gather(1, target[:, None]).sum()


def injected_gradients(model, x, target):
    """∂y_c/∂A_l for each l, by differentiating a zero perturbation added to layer l only."""
    grads = []
    with torch.enable_grad():
        for layer in range(len(model.blocks)):
            out = model.forward_explained(x)
            delta = torch.zeros_like(out.attentions[layer], requires_grad=True)
            y = logit_with_perturbation(model, x, layer, delta, target)
            (g,) = torch.autograd.grad(y, delta)
            grads.append(g)
    return grads


def retained_gradients(model, x, target):
    """Per-layer torch.autograd.grad on the attention tensors kept from one forward pass."""
    with torch.enable_grad():
        out = model.forward_explained(x)
        y = out.logits.gather(1, target[:, None]).sum()
        grads = [torch.autograd.grad(y, a, retain_graph=True)[0] for a in out.attentions]
    return out, grads


def test_gradients_equal_perturbation_of_that_layer_only():
    model = make_model()
    x = images()
    ag = attention_gradients(model, x)
    assert len(ag.gradients) == len(ag.attentions) == CFG.depth
    mine = injected_gradients(model, x, ag.target)
    for layer in range(CFG.depth):
        assert ag.gradients[layer].shape == ag.attentions[layer].shape == (2, 4, 1 + 1 + 12, 14)
        assert torch.allclose(ag.gradients[layer], mine[layer], atol=1e-10, rtol=1e-8)
        assert ag.gradients[layer].abs().max() > 1e-3
    # Layers have different gradients, so a mispairing could not pass unnoticed.
    assert not torch.allclose(mine[0], mine[-1], atol=1e-4)


def test_gradients_match_finite_differences():
    model = make_model(seed=1)
    x = images(seed=1)
    ag = attention_gradients(model, x, target=3)
    g = torch.Generator().manual_seed(7)
    eps = 1e-5
    target = torch.full((2,), 3)
    for layer in range(CFG.depth):
        E = torch.randn(ag.attentions[layer].shape, generator=g, dtype=torch.float64)
        with torch.no_grad():
            up = logit_with_perturbation(model, x, layer, eps * E, target)
            down = logit_with_perturbation(model, x, layer, -eps * E, target)
        numeric = (up - down) / (2 * eps)
        analytic = (ag.gradients[layer] * E).sum()
        assert abs(numeric - analytic) <= 1e-6 * max(1.0, abs(analytic))
        # The other layers' gradients do not explain this change.
        for other in range(CFG.depth):
            if other != layer:
                assert abs((ag.gradients[other] * E).sum() - numeric) > 1e-4


def test_gradients_pair_with_their_own_layer():
    """Would fail if the gradient list came back reversed relative to the attention list."""
    model = make_model(seed=2)
    x = images(seed=2)
    ag = attention_gradients(model, x)
    out, mine = retained_gradients(model, x, ag.target)
    for a, b in zip(ag.attentions, out.attentions, strict=True):
        assert torch.allclose(a, b.detach(), atol=1e-12)
    for layer in range(CFG.depth):
        assert torch.allclose(ag.gradients[layer], mine[layer], atol=1e-10, rtol=1e-8)
    grid, npre = out.grid, out.num_prefix_tokens
    correct = relevance(ag.attentions, ag.gradients, grid, npre)
    reference = relevance([a.detach() for a in out.attentions], mine, grid, npre)
    loop_ref, _ = ref_relevance_maps(ag.attentions, mine, npre, 0, 0, grid)
    reversed_pairs = relevance(ag.attentions, ag.gradients[::-1], grid, npre)
    assert torch.allclose(correct, reference, atol=1e-10)
    assert torch.allclose(correct, loop_ref, atol=1e-10)
    assert not torch.allclose(correct, reversed_pairs, atol=1e-3)
    g_correct = gradient_rollout(ag.attentions, ag.gradients, grid, npre)
    g_reference = gradient_rollout(ag.attentions, mine, grid, npre)
    g_reversed = gradient_rollout(ag.attentions, ag.gradients[::-1], grid, npre)
    assert torch.allclose(g_correct, g_reference, atol=1e-10)
    assert not torch.allclose(g_correct, g_reversed, atol=1e-3)


def test_default_target_is_top_prediction():
    model = make_model(seed=3)
    x = images(b=3, seed=3)
    ag = attention_gradients(model, x)
    with torch.no_grad():
        logits = model(x)
    assert torch.equal(ag.target, logits.argmax(dim=1))
    assert ag.target.dtype == torch.long
    assert torch.allclose(ag.logits, logits, atol=1e-10)
    assert not ag.logits.requires_grad
    assert all(not a.requires_grad for a in ag.attentions)
    assert all(not g.requires_grad for g in ag.gradients)
    # Only attention gradients: no weight gradients left behind, no hooks changing later passes.
    assert all(p.grad is None for p in model.parameters())
    with torch.no_grad():
        assert torch.allclose(model(x), logits, atol=1e-12)


def test_explicit_target_class():
    model = make_model(seed=4)
    x = images(seed=4)
    with torch.no_grad():
        top = model(x).argmax(dim=1)
    c = int((top[0] + 1) % CFG.num_classes)  # not the top class of image 0
    ag = attention_gradients(model, x, target=c)
    assert ag.target.tolist() == [c, c]
    mine = injected_gradients(model, x, torch.tensor([c, c]))
    for got, ref in zip(ag.gradients, mine, strict=True):
        assert torch.allclose(got, ref, atol=1e-10, rtol=1e-8)
    default = attention_gradients(model, x)
    assert not torch.allclose(default.gradients[-1][0], ag.gradients[-1][0], atol=1e-6)
    # One class per image, as a tensor.
    per_image = torch.tensor([1, 4])
    ag2 = attention_gradients(model, x, target=per_image)
    assert ag2.target.tolist() == [1, 4]
    mine2 = injected_gradients(model, x, per_image)
    for got, ref in zip(ag2.gradients, mine2, strict=True):
        assert torch.allclose(got, ref, atol=1e-10, rtol=1e-8)


@pytest.mark.parametrize("bad", [5, -1, 100])
def test_out_of_range_target_is_refused(bad):
    model = make_model(seed=5)
    with pytest.raises(ValueError, match="out of range"):
        attention_gradients(model, images(seed=5), target=bad)


def test_model_without_head_is_refused():
    """num_classes=0: forward_explained returns the pooled features (B, D) as "logits".

    Gradient methods need a class logit y_c; explaining feature channel argmax(features) as if it
    were a class is silently wrong, so attention_gradients must refuse such a model.
    """
    model = make_model(CFG.replace(num_classes=0), seed=6)
    with pytest.raises(ValueError, match="no classification head"):
        attention_gradients(model, images(seed=6))
    with pytest.raises(ValueError, match="no classification head"):
        attention_gradients(model, images(seed=6), target=3)


def test_float32_model_gradients_match_retained():
    model = make_model(seed=8).float()
    x = images(seed=8).float()
    ag = attention_gradients(model, x, target=2)
    _, mine = retained_gradients(model, x, torch.tensor([2, 2]))
    for got, ref in zip(ag.gradients, mine, strict=True):
        assert torch.allclose(got, ref, atol=1e-5, rtol=1e-4)


def test_target_count_not_matching_batch_is_refused():
    model = make_model(seed=7)
    with pytest.raises(ValueError):
        attention_gradients(model, images(b=2, seed=7), target=torch.tensor([1, 2, 3]))
