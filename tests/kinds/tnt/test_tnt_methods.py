"""Every method the TNT kind claims, against float64 references written from docs/methods.md's
definitions ("A TNT's outer attention") on timm's own outer attention and its gradients (a tiny
perturbed TNT, 32 px, a 4×4 patch grid): a block's query row over the patches (each head and
their mean; without a query the CLS row), DINO masks, rollout (every fusion, discard and start),
gradient rollout, relevance, Grad-SAM and Grad-CAM on attention, each written out with loops
over the outer blocks; the window's head grid; head statistics; the table's CAM family on the
blocks' outer norms; what it refuses says why."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tnt_helpers import SETTINGS, SIZE, Softmaxes, save_bare, tiny_timm_tnt
from zoo_helpers import images

from vitviz.checkpoints import load_checkpoint
from vitviz.explain.methods import get_method

timm = pytest.importorskip("timm")

GRID, N, L = (4, 4), 16, 2
CELL = (1, 2)


@pytest.fixture(scope="module", params=[False, True], ids=["current", "legacy"])
def case(request, tmp_path_factory):
    """(loaded TNT, its analysis, timm's float64 outer attention and ∂y_c/∂A per block
    (heads, 1 + N, 1 + N), the class c)."""
    ref = tiny_timm_tnt(legacy=request.param, seed=11 + request.param)
    path = tmp_path_factory.mktemp("tnt") / "tnt.pth"
    loaded = load_checkpoint(save_bare(ref, path, SETTINGS))
    x = images(1, SIZE, SIZE, seed=9)
    a = loaded.kind.analyze(loaded, x[0])
    ref64 = ref.double()
    with Softmaxes() as mode:
        logits = ref64(x.double())
    outer = mode.out[1::2]
    c = int(logits[0].argmax())
    grads = torch.autograd.grad(logits[0, c], outer)
    return loaded, a, [t[0].detach() for t in outer], [g[0] for g in grads], c


def _row_index(cell) -> int:
    return 0 if cell is None else 1 + cell[0] * GRID[1] + cell[1]


def _patches(row: torch.Tensor) -> torch.Tensor:
    return row[1:].reshape(GRID)


def _minmax(m: torch.Tensor) -> torch.Tensor:
    """Scaled to [0, 1]; a constant map becomes zero."""
    span = m.max() - m.min()
    return torch.zeros_like(m) if span == 0 else (m - m.min()) / span


def _close(got, want, atol=1e-5) -> None:
    got = torch.as_tensor(np.asarray(got), dtype=torch.float64)
    assert got.shape == want.shape
    assert float((got - want).abs().max()) < atol, float((got - want).abs().max())


@pytest.mark.parametrize("cell", [None, CELL])
def test_attention_is_the_querys_row_over_the_patches(case, cell) -> None:
    _, a, attn, _, _ = case
    method = get_method("attention")
    for b in range(L):
        A = attn[b]
        for h in range(A.shape[0]):
            want = _patches(A[h, _row_index(cell)])
            _close(method(a, cell, None, {"layer": b, "head": h}), want)
        mean = sum(_patches(A[h, _row_index(cell)]) for h in range(A.shape[0])) / A.shape[0]
        _close(method(a, cell, None, {"layer": b, "head": -1}), mean)


def _rollout(attn, cell, fuse, start=0) -> torch.Tensor:
    """Row q of Π_b rownorm(fuse_h(A_b) + I), b from the last down to ``start``."""
    r = torch.zeros(1 + N, dtype=torch.float64)
    r[_row_index(cell)] = 1.0
    for b in range(L - 1, start - 1, -1):
        m = fuse(attn[b]) + torch.eye(1 + N, dtype=torch.float64)
        m = m / m.sum(dim=-1, keepdim=True)
        nxt = torch.zeros_like(r)
        for i in range(1 + N):
            for j in range(1 + N):
                nxt[j] += r[i] * m[i, j]
        r = nxt
    p = _patches(r)
    return p / p.max()


FUSIONS = {"mean": lambda A: A.mean(dim=0), "max": lambda A: A.max(dim=0).values,
           "min": lambda A: A.min(dim=0).values}  # fmt: skip


@pytest.mark.parametrize("fusion", list(FUSIONS))
@pytest.mark.parametrize("cell", [None, CELL])
def test_rollout_is_the_product_over_the_outer_blocks(case, fusion, cell) -> None:
    _, a, attn, _, _ = case
    got = get_method("rollout")(a, cell, None, {"fusion": fusion})
    _close(got, _rollout(attn, cell, FUSIONS[fusion]))
    got = get_method("rollout")(a, cell, None, {"fusion": fusion, "start_layer": 1})
    _close(got, _rollout(attn, cell, FUSIONS[fusion], start=1))


@pytest.mark.parametrize("cell", [None, CELL])
def test_gradient_rollout_and_relevance(case, cell) -> None:
    _, a, attn, grads, c = case
    positive = [(A * G).mean(dim=0).clamp_min(0) for A, G in zip(attn, grads, strict=True)]
    # gradient rollout: rollout of (mean_h A ⊙ ∂y/∂A)⁺
    want = _rollout(positive, cell, lambda M: M)
    _close(get_method("gradient-rollout")(a, cell, c, {}), want, atol=1e-4)
    # relevance: r ← r + r·mean_h((∂y/∂A ⊙ A)⁺) from the last block down, min-max
    bars = [(G * A).clamp_min(0).mean(dim=0) for A, G in zip(attn, grads, strict=True)]
    r = torch.zeros(1 + N, dtype=torch.float64)
    r[_row_index(cell)] = 1.0
    for b in range(L - 1, -1, -1):
        r = r + torch.stack([sum(r[i] * bars[b][i, j] for i in range(1 + N)) for j in range(1 + N)])
    _close(get_method("relevance")(a, cell, c, {}), _minmax(_patches(r)), atol=1e-4)


@pytest.mark.parametrize("cell", [None, CELL])
def test_grad_sam_and_gradcam_on_attention(case, cell) -> None:
    _, a, attn, grads, c = case
    q = _row_index(cell)
    total = torch.zeros(GRID, dtype=torch.float64)
    for A, G in zip(attn, grads, strict=True):
        for h in range(A.shape[0]):
            total += _patches(G[h, q].clamp_min(0) * A[h, q])
    want = _minmax(total / (L * attn[0].shape[0]))
    _close(get_method("grad-sam")(a, cell, c, {}), want, atol=1e-4)
    A, G = attn[-1], grads[-1]
    cam = sum(_patches(A[h, q]) * _patches(G[h, q]).mean() for h in range(A.shape[0]))
    want = _minmax((cam / A.shape[0]).clamp_min(0))
    _close(get_method("attention-gradcam")(a, cell, c, {}), want, atol=1e-4)


def test_dino_masks_hold_the_fewest_patches_reaching_the_share(case) -> None:
    _, a, attn, _, _ = case
    for b in range(L):
        for h in range(attn[b].shape[0]):
            row = _patches(attn[b][h, 0]).flatten()
            share = row / row.sum()
            order = torch.argsort(share, descending=True)
            want = torch.zeros(N, dtype=torch.float64)
            total = 0.0
            for j in order.tolist():
                if total >= 0.6:
                    break
                want[j], total = 1.0, total + float(share[j])
            got = get_method("dino-masks")(a, None, None, {"layer": b, "head": h})
            _close(got, want.reshape(GRID))


def test_the_window_head_grid_and_statistics(case) -> None:
    from types import SimpleNamespace

    loaded, a, attn, _, _ = case
    maps = loaded.kind.query_maps(SimpleNamespace(analysis=a, loaded=loaded), CELL)
    q = _row_index(CELL)
    for b in range(L):
        want = torch.stack([_patches(attn[b][h, q]) for h in range(attn[b].shape[0])])
        _close(maps.head_maps[b], want)
        _close(maps.prefix_attention[b, :, 0], attn[b][:, q, 0])
    assert list(maps.query_tokens) == [q - 1] * L
    stats = loaded.kind.head_statistics(a)
    ys, xs = np.divmod(np.arange(N), GRID[1])
    centres = np.stack([(ys + 0.5) * 8, (xs + 0.5) * 8], axis=1)
    for b in range(L):
        A = attn[b].numpy()
        for h in range(A.shape[0]):
            dist = ent = share = 0.0
            for i in range(N):
                row = A[h, 1 + i]
                for j in range(N):
                    dist += row[1 + j] * float(np.linalg.norm(centres[i] - centres[j]))
                ent -= float((row * np.log(row)).sum())
                share += row[0]
            assert abs(stats["distance"][b, h] - dist / N) < 1e-3
            assert abs(stats["entropy"][b, h] - ent / N) < 1e-4
            assert abs(stats["prefix_share"][b, h] - share / N) < 1e-5


@pytest.mark.parametrize(("layer", "part"), [("1.output", None), ("-1.norm1", "norm_out")])
def test_gradcam_reads_a_blocks_patch_tokens(layer, part, tmp_path) -> None:
    """Grad-CAM on block 1's output (its patch tokens, not its pixel tokens) and on its outer
    attention's LayerNorm: ReLU(Σ_k mean_p(∂y_c/∂F_k)·F_k) over the patches, from timm's."""
    ref = tiny_timm_tnt(seed=31)
    loaded = load_checkpoint(save_bare(ref, tmp_path / "tnt.pth", SETTINGS))
    x = images(1, SIZE, SIZE, seed=2)
    a = loaded.kind.analyze(loaded, x[0])
    ref64 = ref.double()
    kept = []
    module = ref64.blocks[1] if part is None else getattr(ref64.blocks[1], part)
    handle = module.register_forward_hook(
        lambda _m, _i, o: kept.append(o[1] if isinstance(o, tuple) else o)
    )
    try:
        logits = ref64(x.double())
    finally:
        handle.remove()
    c = int(logits[0].argmax())
    (grad,) = torch.autograd.grad(logits[0, c], kept[0])
    F, G = kept[0][0, 1:].detach(), grad[0, 1:]  # (N, C), the CLS left out
    cam = (F * G.mean(dim=0)).sum(dim=1).clamp_min(0).reshape(GRID)
    got = torch.as_tensor(np.asarray(get_method("gradcam")(a, None, c, {"layer": layer})))
    _close(_minmax(got.double()), _minmax(cam), atol=1e-4)


def test_transformer_attribution_is_refused_with_the_reason(case) -> None:
    a = case[1]
    with pytest.raises(ValueError, match="no rule for a TNT's inner transformer"):
        get_method("transformer-attribution")(a)
