"""Raw attention maps, prefix attention, DINO masks and head statistics (DESIGN §5)."""

from __future__ import annotations

import math

import pytest
import torch

from vitviz.blocks import VisionTransformer, ViTConfig
from vitviz.explain import (
    attention_entropy,
    attention_maps,
    dino_masks,
    head_statistics,
    mean_attention_distance,
    prefix_attention,
    prefix_share,
    query_token,
    token_norms,
)

B, H = 2, 3
GRID = (3, 5)
GH, GW = GRID
P = GH * GW


def random_attention(num_prefix, seed=0, sharp=2.0, b=B):
    N = num_prefix + P
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(sharp * torch.randn(b, H, N, N, generator=g, dtype=torch.float64), -1)


def queries(num_prefix):
    """CLS, the last prefix token, a patch, and the mean over patch queries."""
    return [0, num_prefix - 1, query_token((2, 3), GRID, num_prefix), None]


def patch_pos(t):
    return (t // GW, t % GW)


# -- raw maps ---------------------------------------------------------------------------------


@pytest.mark.parametrize("num_prefix", [1, 2])
def test_attention_maps_hand_indexed(num_prefix):
    attn = random_attention(num_prefix, seed=num_prefix)
    for q in queries(num_prefix):
        maps = attention_maps(attn, GRID, num_prefix, query=q)
        assert maps.shape == (B, H, GH, GW)
        for b in range(B):
            for h in range(H):
                for r in range(GH):
                    for c in range(GW):
                        key = num_prefix + r * GW + c
                        if q is None:
                            rows = range(num_prefix, num_prefix + P)
                            expected = sum(attn[b, h, i, key].item() for i in rows) / P
                        else:
                            expected = attn[b, h, q, key].item()
                        assert math.isclose(maps[b, h, r, c].item(), expected, abs_tol=1e-15)


def test_attention_maps_patch_query_is_row_major():
    """A query patch attending only to its right neighbour shows a single 1 there."""
    num_prefix = 1
    N = num_prefix + P
    attn = torch.zeros(1, 1, N, N, dtype=torch.float64)
    q = query_token((1, 2), GRID, num_prefix)
    attn[0, 0, q, query_token((1, 3), GRID, num_prefix)] = 1.0
    maps = attention_maps(attn, GRID, num_prefix, query=q)
    expected = torch.zeros(1, 1, GH, GW, dtype=torch.float64)
    expected[0, 0, 1, 3] = 1.0
    assert torch.equal(maps, expected)


@pytest.mark.parametrize("num_prefix", [1, 3])
def test_prefix_attention(num_prefix):
    attn = random_attention(num_prefix, seed=5)
    for q in queries(num_prefix):
        got = prefix_attention(attn, num_prefix, query=q)
        assert got.shape == (B, H, num_prefix)
        for b in range(B):
            for h in range(H):
                for t in range(num_prefix):
                    if q is None:
                        rows = range(num_prefix, num_prefix + P)
                        expected = sum(attn[b, h, i, t].item() for i in rows) / P
                    else:
                        expected = attn[b, h, q, t].item()
                    assert math.isclose(got[b, h, t].item(), expected, abs_tol=1e-15)
        # Prefix part and patch part together hold the whole row.
        maps = attention_maps(attn, GRID, num_prefix, query=q)
        total = got.sum(-1) + maps.sum((-2, -1))
        assert torch.allclose(total, torch.ones(B, H, dtype=torch.float64), atol=1e-12)


# -- DINO masks -------------------------------------------------------------------------------


def ref_mask(values, threshold):
    """Patches (indices) kept: the largest ones until their share reaches the threshold."""
    total = sum(values)
    order = sorted(range(len(values)), key=lambda t: -values[t])
    kept, cum = [], 0.0
    for t in order:
        if cum >= threshold:
            break
        kept.append(t)
        cum += values[t] / total
    return set(kept)


@pytest.mark.parametrize("threshold", [0.3, 0.6, 0.9])
@pytest.mark.parametrize("num_prefix", [1, 2])
def test_dino_masks_smallest_covering_set(threshold, num_prefix):
    attn = random_attention(num_prefix, seed=int(threshold * 10) + num_prefix)
    for q in [0, query_token((0, 4), GRID, num_prefix)]:
        masks = dino_masks(attn, GRID, num_prefix, threshold=threshold, query=q)
        assert masks.shape == (B, H, GH, GW)
        assert masks.dtype == torch.bool
        for b in range(B):
            for h in range(H):
                values = [attn[b, h, q, num_prefix + t].item() for t in range(P)]
                total = sum(values)
                kept = {r * GW + c for r in range(GH) for c in range(GW) if masks[b, h, r, c]}
                assert kept == ref_mask(values, threshold)
                # Coverage: the mask holds the threshold share of the patch mass.
                assert sum(values[t] for t in kept) >= threshold * total
                # Minimality: no set with one patch fewer can hold it (the largest can't).
                largest = sorted(values, reverse=True)[: len(kept) - 1]
                assert sum(largest) < threshold * total
                # The mask is made of the largest patches.
                outside = [values[t] for t in range(P) if t not in kept]
                if outside:
                    assert min(values[t] for t in kept) >= max(outside)


def test_dino_masks_hand_case():
    """CLS attention 0.5, 0.3, 0.1, ... over the patches: 60% needs the two largest."""
    num_prefix = 1
    N = num_prefix + P
    attn = torch.zeros(1, 1, N, N, dtype=torch.float64)
    attn[0, 0, 0, 0] = 0.2  # attention to CLS itself is not a patch
    weights = {7: 0.4, 2: 0.24, 11: 0.08, 0: 0.08}
    for t, w in weights.items():
        attn[0, 0, 0, num_prefix + t] = w
    masks = dino_masks(attn, GRID, num_prefix, threshold=0.6)
    kept = {r * GW + c for r in range(GH) for c in range(GW) if masks[0, 0, r, c]}
    assert kept == {7, 2}  # 0.5 + 0.3 of the patch mass
    masks = dino_masks(attn, GRID, num_prefix, threshold=0.85)
    assert int(masks.sum()) == 3


def test_dino_masks_refuse_bad_threshold():
    attn = random_attention(1)
    for bad in (0.0, -0.5, 1.5):
        with pytest.raises(ValueError):
            dino_masks(attn, GRID, 1, threshold=bad)


# -- head statistics --------------------------------------------------------------------------


def ref_distance(attn, num_prefix, patch):
    out = torch.zeros(attn.shape[0], attn.shape[1], dtype=torch.float64)
    for b in range(attn.shape[0]):
        for h in range(attn.shape[1]):
            acc = 0.0
            for i in range(P):
                ri, ci = patch_pos(i)
                for j in range(P):
                    rj, cj = patch_pos(j)
                    d = math.hypot(ri - rj, ci - cj) * patch
                    acc += attn[b, h, num_prefix + i, num_prefix + j].item() * d
            out[b, h] = acc / P
    return out


def ref_entropy(attn, num_prefix):
    out = torch.zeros(attn.shape[0], attn.shape[1], dtype=torch.float64)
    N = attn.shape[-1]
    for b in range(attn.shape[0]):
        for h in range(attn.shape[1]):
            acc = 0.0
            for i in range(num_prefix, N):
                for j in range(N):
                    a = attn[b, h, i, j].item()
                    if a > 0:
                        acc -= a * math.log(a)
            out[b, h] = acc / (N - num_prefix)
    return out


def ref_prefix_share(attn, num_prefix):
    out = torch.zeros(attn.shape[0], attn.shape[1], dtype=torch.float64)
    N = attn.shape[-1]
    for b in range(attn.shape[0]):
        for h in range(attn.shape[1]):
            acc = 0.0
            for i in range(num_prefix, N):
                acc += sum(attn[b, h, i, j].item() for j in range(num_prefix))
            out[b, h] = acc / (N - num_prefix)
    return out


@pytest.mark.parametrize("num_prefix", [0, 1, 3])
def test_mean_attention_distance_reference(num_prefix):
    attn = random_attention(num_prefix, seed=40 + num_prefix)
    got = mean_attention_distance(attn, GRID, num_prefix, patch_size=16)
    assert got.shape == (B, H)
    assert torch.allclose(got, ref_distance(attn, num_prefix, 16), atol=1e-10)


def test_mean_attention_distance_identity_is_zero():
    N = 1 + P
    attn = torch.eye(N, dtype=torch.float64).expand(B, H, N, N)
    got = mean_attention_distance(attn, GRID, 1, patch_size=16)
    assert torch.equal(got, torch.zeros(B, H, dtype=torch.float64))


def test_mean_attention_distance_hand_case():
    """2 × 3 grid, patch 16: every patch looks only at patch (0, 0)."""
    grid, num_prefix, patch = (2, 3), 1, 16
    N = num_prefix + 6
    attn = torch.zeros(1, 1, N, N, dtype=torch.float64)
    attn[0, 0, :, num_prefix] = 1.0
    got = mean_attention_distance(attn, grid, num_prefix, patch)
    expected = patch * (0 + 1 + 2 + 1 + math.sqrt(2) + math.sqrt(5)) / 6
    assert math.isclose(got.item(), expected, rel_tol=1e-12)
    # Half of every row going to CLS halves the value: weights are used as they are.
    attn[0, 0, :, 0] = 0.5
    attn[0, 0, :, num_prefix] = 0.5
    got = mean_attention_distance(attn, grid, num_prefix, patch)
    assert math.isclose(got.item(), expected / 2, rel_tol=1e-12)
    # Attending to the right neighbour (or, at the right edge, the left one): exactly one patch.
    attn = torch.zeros(1, 1, N, N, dtype=torch.float64)
    for r in range(2):
        for c in range(3):
            c2 = c + 1 if c < 2 else c - 1
            attn[0, 0, num_prefix + r * 3 + c, num_prefix + r * 3 + c2] = 1.0
    assert math.isclose(mean_attention_distance(attn, grid, num_prefix, patch).item(), 16.0)


@pytest.mark.parametrize("num_prefix", [0, 1, 3])
def test_entropy_reference(num_prefix):
    attn = random_attention(num_prefix, seed=50 + num_prefix)
    got = attention_entropy(attn, num_prefix)
    assert got.shape == (B, H)
    assert torch.allclose(got, ref_entropy(attn, num_prefix), atol=1e-12)


def test_entropy_uniform_and_one_hot():
    N = 2 + P
    uniform = torch.full((B, H, N, N), 1.0 / N, dtype=torch.float64)
    assert torch.allclose(
        attention_entropy(uniform, 2), torch.full((B, H), math.log(N), dtype=torch.float64)
    )
    one_hot = torch.eye(N, dtype=torch.float64).expand(B, H, N, N)
    assert torch.equal(attention_entropy(one_hot, 2), torch.zeros(B, H, dtype=torch.float64))


@pytest.mark.parametrize("num_prefix", [1, 3])
def test_prefix_share_reference(num_prefix):
    attn = random_attention(num_prefix, seed=60 + num_prefix)
    got = prefix_share(attn, num_prefix)
    assert torch.allclose(got, ref_prefix_share(attn, num_prefix), atol=1e-12)
    N = num_prefix + P
    uniform = torch.full((1, 1, N, N), 1.0 / N, dtype=torch.float64)
    assert math.isclose(prefix_share(uniform, num_prefix).item(), num_prefix / N, rel_tol=1e-12)


def test_token_norms_reference():
    g = torch.Generator().manual_seed(3)
    hidden = [torch.randn(B, 1 + P, 8, generator=g, dtype=torch.float64) for _ in range(4)]
    got = token_norms(hidden)
    assert got.shape == (B, 4, 1 + P)
    for b in range(B):
        for layer in range(4):
            for t in range(1 + P):
                ref = math.sqrt(sum(v * v for v in hidden[layer][b, t].tolist()))
                assert math.isclose(got[b, layer, t].item(), ref, rel_tol=1e-12)


def test_head_statistics_stacks_layers():
    layers = [random_attention(2, seed=70 + i) for i in range(3)]
    stats = head_statistics(layers, GRID, 2, patch_size=14)
    for name in ("mean_distance", "entropy", "prefix_share"):
        assert getattr(stats, name).shape == (B, 3, H)
    for i, a in enumerate(layers):
        assert torch.allclose(stats.mean_distance[:, i], ref_distance(a, 2, 14), atol=1e-10)
        assert torch.allclose(stats.entropy[:, i], ref_entropy(a, 2), atol=1e-12)
        assert torch.allclose(stats.prefix_share[:, i], ref_prefix_share(a, 2), atol=1e-12)


def test_batch_independence_of_maps_and_stats():
    num_prefix = 2
    attn = random_attention(num_prefix, seed=80, b=3)
    g = torch.Generator().manual_seed(4)
    hidden = [torch.randn(3, num_prefix + P, 8, generator=g) for _ in range(2)]
    q = query_token((1, 1), GRID, num_prefix)
    funcs = {
        "maps": lambda a: attention_maps(a, GRID, num_prefix, query=q),
        "maps_mean": lambda a: attention_maps(a, GRID, num_prefix, query=None),
        "prefix": lambda a: prefix_attention(a, num_prefix, query=0),
        "masks": lambda a: dino_masks(a, GRID, num_prefix, threshold=0.6),
        "distance": lambda a: mean_attention_distance(a, GRID, num_prefix, 16),
        "entropy": lambda a: attention_entropy(a, num_prefix),
        "share": lambda a: prefix_share(a, num_prefix),
        "stats": lambda a: head_statistics([a, a.flip(-1)], GRID, num_prefix, 16).entropy,
    }
    for name, f in funcs.items():
        full = f(attn)
        for b in range(3):
            alone = f(attn[b : b + 1])
            assert torch.allclose(full[b].double(), alone[0].double(), atol=1e-14), name
    norms = token_norms(hidden)
    for b in range(3):
        assert torch.allclose(norms[b], token_norms([h[b : b + 1] for h in hidden])[0])


def test_statistics_on_a_real_model():
    cfg = ViTConfig(
        image_size=32,
        patch_size=8,
        num_classes=4,
        dim=32,
        depth=2,
        heads=4,
        num_register_tokens=1,
    )
    torch.manual_seed(0)
    model = VisionTransformer(cfg).eval()
    with torch.no_grad():
        out = model.forward_explained(torch.randn(2, 3, 24, 40), hidden_states=True)
    assert out.grid == (3, 5)
    stats = head_statistics(out.attentions, out.grid, out.num_prefix_tokens, cfg.patch_size)
    N = 2 + P
    assert stats.mean_distance.shape == (2, 2, 4)
    assert (stats.entropy <= math.log(N) + 1e-5).all()
    assert (stats.entropy >= 0).all()
    assert ((stats.prefix_share >= 0) & (stats.prefix_share <= 1 + 1e-6)).all()
    max_dist = math.hypot(GH - 1, GW - 1) * cfg.patch_size
    assert ((stats.mean_distance >= 0) & (stats.mean_distance <= max_dist)).all()
    norms = token_norms(out.hidden_states)
    assert norms.shape == (2, 2, N)
    assert torch.allclose(norms[:, -1], out.hidden_states[-1].norm(dim=-1))
