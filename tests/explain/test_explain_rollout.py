"""Rollout and gradient rollout against float64 references written from DESIGN §5.

The references use explicit Python loops over FULL N × N matrices: Â_l per entry, the discard by
sorting all N² entries, Ã_l = rownorm(Â_l + I), R = Ã_L ⋯ Ã_s as a full matrix product, and the
map R[q, patches] / max. The code propagates a single row instead; agreeing with the full product
is the proof that the row computation is right.
"""

from __future__ import annotations

import math

import pytest
import torch
from loop_math import matmul

from vitviz.explain import fuse_heads, gradient_rollout, query_token, rollout, rollout_row

B, L, H = 2, 4, 3
GRID = (3, 5)
P = GRID[0] * GRID[1]


# -- references (plain Python floats, loops) ----------------------------------------------------


def ref_fuse(A, fusion, heads=None):
    """A: H × N × N nested lists -> N × N."""
    hs = list(range(len(A))) if heads is None else list(heads)
    N = len(A[0])
    out = [[0.0] * N for _ in range(N)]
    for i in range(N):
        for j in range(N):
            vals = [A[h][i][j] for h in hs]
            if fusion == "mean":
                out[i][j] = sum(vals) / len(vals)
            elif fusion == "max":
                out[i][j] = max(vals)
            else:
                out[i][j] = min(vals)
    return out


def smallest_entries(M, ratio):
    """The ⌊ratio·N²⌋ smallest (i, j) of M, found by sorting all N² entries."""
    N = len(M)
    k = math.floor(ratio * N * N)
    entries = sorted((M[i][j], i, j) for i in range(N) for j in range(N))
    return [(i, j) for _, i, j in entries[:k]]


def ref_discard(M, ratio, protected):
    out = [row[:] for row in M]
    for i, j in smallest_entries(M, ratio):
        if not (i == j and i in protected):
            out[i][j] = 0.0
    return out


def ref_add_identity_rownorm(M):
    N = len(M)
    out = []
    for i in range(N):
        row = [M[i][j] + (1.0 if i == j else 0.0) for j in range(N)]
        s = sum(row)
        out.append([v / s for v in row])
    return out


def ref_rollout_matrix(fused_layers, ratio, start, protected):
    """Full R = Ã_L ⋯ Ã_s from per-layer Â_l (each N × N)."""
    tilde = [
        ref_add_identity_rownorm(ref_discard(M, ratio, protected)) for M in fused_layers[start:]
    ]
    R = tilde[-1]
    for M in reversed(tilde[:-1]):
        R = matmul(R, M)
    return R


def ref_map(R, query, num_prefix):
    """R[q, patches] (or the mean over patch queries), divided by its maximum."""
    N = len(R)
    if query is None:
        row = [sum(R[i][j] for i in range(num_prefix, N)) / (N - num_prefix) for j in range(N)]
    else:
        row = R[query]
    patches = row[num_prefix:]
    peak = max(patches)
    return [v / peak for v in patches]


def as_grid(values):
    gh, gw = GRID
    return [[values[r * gw + c] for c in range(gw)] for r in range(gh)]


# -- data -----------------------------------------------------------------------------------


def random_attention(num_prefix, query, seed=0):
    """L × (B, H, N, N) float64 softmax attention; A[h, q, q] made the smallest entry."""
    N = num_prefix + P
    g = torch.Generator().manual_seed(seed)
    layers = []
    for _ in range(L):
        a = torch.softmax(torch.randn(B, H, N, N, generator=g, dtype=torch.float64), dim=-1)
        if query is not None:
            low = a.flatten(2).amin(dim=-1)  # (B, H)
            a[:, :, query, query] = 0.9 * low
            a[:, :, query] /= a[:, :, query].sum(dim=-1, keepdim=True)
        layers.append(a)
    return layers


def random_gradients(num_prefix, seed=1):
    N = num_prefix + P
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, N, N, generator=g, dtype=torch.float64) for _ in range(L)]


def assert_map_equal(got, ref_maps):
    assert got.shape == (B, *GRID)
    assert got.dtype == torch.float64
    expected = torch.tensor([as_grid(m) for m in ref_maps], dtype=torch.float64)
    assert torch.allclose(got, expected, atol=1e-12, rtol=1e-10), (got - expected).abs().max()


PATCH_Q = (1, 3)

# -- rollout ----------------------------------------------------------------------------------


@pytest.mark.parametrize("num_prefix", [1, 3])
@pytest.mark.parametrize("query_kind", ["cls", "patch"])
@pytest.mark.parametrize("start", [0, 2])
@pytest.mark.parametrize("ratio", [0.0, 0.3, 0.9])
@pytest.mark.parametrize(
    ("fusion", "heads"), [("mean", None), ("max", None), ("min", None), ("mean", (0, 2))]
)
def test_rollout_matches_full_matrix_reference(num_prefix, query_kind, start, ratio, fusion, heads):
    q = 0 if query_kind == "cls" else query_token(PATCH_Q, GRID, num_prefix)
    assert q == (0 if query_kind == "cls" else num_prefix + 1 * 5 + 3)
    attn = random_attention(num_prefix, q, seed=num_prefix + 7 * start)
    got_map = rollout(
        attn,
        GRID,
        num_prefix,
        query=q,
        fusion=fusion,
        heads=heads,
        discard_ratio=ratio,
        start_layer=start,
    )
    got_row = rollout_row(
        attn,
        query=q,
        num_prefix=num_prefix,
        fusion=fusion,
        heads=heads,
        discard_ratio=ratio,
        start_layer=start,
    )
    ref_maps = []
    for b in range(B):
        fused = [ref_fuse(a[b].tolist(), fusion, heads) for a in attn]
        R = ref_rollout_matrix(fused, ratio, start, protected={q})
        ref_maps.append(ref_map(R, q, num_prefix))
        # The row computation equals row q of the full matrix product.
        assert torch.allclose(got_row[b], torch.tensor(R[q], dtype=torch.float64), atol=1e-12)
        assert math.isclose(sum(R[q]), 1.0, rel_tol=1e-12)
        if ratio > 0:
            # The q→q entry really is among the discarded candidates, so protection matters.
            for M in fused[start:]:
                assert (q, q) in smallest_entries(M, ratio)
            unprotected = ref_rollout_matrix(fused, ratio, start, protected=set())
            assert not torch.allclose(
                got_row[b], torch.tensor(unprotected[q], dtype=torch.float64), atol=1e-6
            )
    assert_map_equal(got_map, ref_maps)
    assert torch.allclose(got_map.flatten(1).amax(dim=1), torch.ones(B, dtype=torch.float64))


@pytest.mark.parametrize("num_prefix", [0, 1])
def test_rollout_mean_over_patch_queries(num_prefix):
    attn = random_attention(num_prefix, None, seed=11)
    got = rollout(attn, GRID, num_prefix, query=None)
    ref_maps = []
    for b in range(B):
        fused = [ref_fuse(a[b].tolist(), "mean") for a in attn]
        R = ref_rollout_matrix(fused, 0.0, 0, protected=set())
        ref_maps.append(ref_map(R, None, num_prefix))
    assert_map_equal(got, ref_maps)


def test_rollout_row_is_the_row_of_torch_chained_products():
    """Second, torch-only check: r·Ã_L⋯Ã_s against the explicit chain of N × N products."""
    attn = random_attention(1, 0, seed=3)
    row = rollout_row(attn, query=0, num_prefix=1)
    N = 1 + P
    R = torch.eye(N, dtype=torch.float64).expand(B, N, N)
    for a in attn:  # R = Ã_L ⋯ Ã_1 built as ((Ã_L Ã_{L-1}) ...) from the right
        m = a.mean(dim=1) + torch.eye(N, dtype=torch.float64)
        m = m / m.sum(dim=-1, keepdim=True)
        R = m @ R
    assert torch.allclose(row, R[:, 0], atol=1e-12)


def test_rollout_batch_independence():
    attn = random_attention(3, 0, seed=4)
    full = rollout(attn, GRID, 3, query=0, discard_ratio=0.3, fusion="max")
    for b in range(B):
        alone = rollout(
            [a[b : b + 1] for a in attn], GRID, 3, query=0, discard_ratio=0.3, fusion="max"
        )
        assert torch.allclose(full[b], alone[0], atol=1e-14)


def test_fuse_heads_matches_reference():
    a = random_attention(1, None, seed=5)[0]
    for fusion, heads in [("mean", None), ("max", None), ("min", None), ("mean", [2, 0])]:
        got = fuse_heads(a, fusion, heads)
        for b in range(B):
            ref = torch.tensor(ref_fuse(a[b].tolist(), fusion, heads), dtype=torch.float64)
            assert torch.allclose(got[b], ref, atol=1e-15)


def test_rollout_refuses_bad_arguments():
    attn = random_attention(1, None, seed=6)
    with pytest.raises(ValueError):
        rollout(attn, GRID, 1, fusion="median")
    with pytest.raises(ValueError):
        rollout(attn, GRID, 1, heads=[])
    with pytest.raises(ValueError):
        rollout(attn, GRID, 1, heads=[0, H])
    with pytest.raises(ValueError):
        rollout(attn, GRID, 1, discard_ratio=1.0)
    with pytest.raises(ValueError):
        rollout(attn, GRID, 1, discard_ratio=-0.1)
    with pytest.raises(ValueError):
        rollout(attn, GRID, 1, start_layer=L)
    with pytest.raises(ValueError):
        rollout(attn, GRID, 1, query=1 + P)
    with pytest.raises(ValueError):
        rollout(attn, (4, 4), 1)
    with pytest.raises(ValueError):
        rollout([], GRID, 1)
    with pytest.raises(ValueError):
        query_token((3, 0), GRID, 1)


def test_query_token_layout():
    assert query_token(None, GRID, 1) == 0
    assert query_token(None, GRID, 0) is None
    assert query_token((0, 0), GRID, 3) == 3
    assert query_token((2, 4), GRID, 1) == 1 + 2 * 5 + 4
    assert query_token((1, 0), GRID, 0) == 5


# -- gradient rollout -------------------------------------------------------------------------


def ref_grad_fused(A, G):
    """(mean_h(A ⊙ G))⁺ for one image: H × N × N lists -> N × N."""
    Hn, N = len(A), len(A[0])
    return [
        [max(0.0, sum(A[h][i][j] * G[h][i][j] for h in range(Hn)) / Hn) for j in range(N)]
        for i in range(N)
    ]


@pytest.mark.parametrize("num_prefix", [1, 3])
@pytest.mark.parametrize("query_kind", ["cls", "patch"])
@pytest.mark.parametrize("start", [0, 2])
@pytest.mark.parametrize("ratio", [0.0, 0.3])
def test_gradient_rollout_matches_reference(num_prefix, query_kind, start, ratio):
    q = 0 if query_kind == "cls" else query_token(PATCH_Q, GRID, num_prefix)
    attn = random_attention(num_prefix, None, seed=20 + num_prefix)
    grads = random_gradients(num_prefix, seed=30 + num_prefix)
    got = gradient_rollout(
        attn, grads, GRID, num_prefix, query=q, discard_ratio=ratio, start_layer=start
    )
    ref_maps = []
    ref_maps_swapped = []
    for b in range(B):
        A = [a[b].tolist() for a in attn]
        G = [g[b].tolist() for g in grads]
        fused = [ref_grad_fused(A[i], G[i]) for i in range(L)]
        R = ref_rollout_matrix(fused, ratio, start, protected={q})
        ref_maps.append(ref_map(R, q, num_prefix))
        swapped = [ref_grad_fused(A[i], G[L - 1 - i]) for i in range(L)]
        Rs = ref_rollout_matrix(swapped, ratio, start, protected={q})
        ref_maps_swapped.append(ref_map(Rs, q, num_prefix))
    assert_map_equal(got, ref_maps)
    wrong = torch.tensor([as_grid(m) for m in ref_maps_swapped], dtype=torch.float64)
    assert not torch.allclose(got, wrong, atol=1e-6)


def test_gradient_rollout_refuses_mismatched_gradients():
    attn = random_attention(1, None, seed=8)
    grads = random_gradients(1, seed=9)
    with pytest.raises(ValueError):
        gradient_rollout(attn, grads[:-1], GRID, 1)
    with pytest.raises(ValueError):
        gradient_rollout(attn, [g[:, :2] for g in grads], GRID, 1)
