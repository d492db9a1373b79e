"""A prepared rollout serves every query exactly as a fresh computation would, the protected
q→q entry included, and Analysis keeps only a few of them."""

from __future__ import annotations

import torch

from vitviz import explain
from vitviz.explain.rollout import PreparedRollout
from vitviz.kinds.vit.analysis import ROLLOUT_CACHE_SIZE
from vitviz.pipeline.analysis import analyze


def _attention(L: int = 3, B: int = 2, H: int = 2, N: int = 13, seed: int = 0) -> list:
    g = torch.Generator().manual_seed(seed)
    return [
        (3 * torch.randn(B, H, N, N, generator=g, dtype=torch.float64)).softmax(-1)
        for _ in range(L)
    ]


def _discard_protected(m: torch.Tensor, ratio: float, protected: torch.Tensor) -> torch.Tensor:
    """DESIGN §5, written out: zero the ⌊ratio·N²⌋ smallest entries of each (N, N) matrix,
    never a protected query's q→q entry. m: (B, N, N); protected: (B, N) bool."""
    B, N, _ = m.shape
    out = m.clone()
    k = int(ratio * N * N)
    for b in range(B):
        for flat in torch.argsort(m[b].reshape(-1))[:k].tolist():
            q, j = divmod(flat, N)
            if not (q == j and protected[b, q]):
                out[b, q, j] = 0
    return out


def _fresh_row(
    fused: list, query: int | None, num_prefix: int, ratio: float, start: int
) -> torch.Tensor:
    """The definition, matrix by matrix: discard with q→q protected, +I, rownorm, chain."""
    B, N, _ = fused[0].shape
    r = explain.tokens.start_vector(query, N, num_prefix, B, fused[0])
    protected = r > 0
    for m in reversed(fused[start:]):
        m = _discard_protected(m, ratio, protected) + torch.eye(N, dtype=m.dtype)
        r = (r.unsqueeze(1) @ (m / m.sum(-1, keepdim=True))).squeeze(1)
    return r


def test_one_preparation_serves_every_query() -> None:
    attn = _attention()
    fused = [a.mean(1) for a in attn]
    for i, f in enumerate(fused):  # make some diagonal entries the smallest of their layer
        f[:, i + 1, i + 1] = 0.0
    ratio = 0.4
    prepared = PreparedRollout(fused, ratio)
    assert any(bool((r > 0).any()) for r in prepared.restore)  # the correction is exercised
    for query in (0, 1, 2, 3, 7, 12, None):
        for start in (0, 1, 2):
            expected = _fresh_row(fused, query, 1, ratio, start)
            torch.testing.assert_close(prepared.row(query, 1, start), expected, rtol=0, atol=1e-12)


def test_preparation_leaves_the_callers_layers_alone_unless_handed_over() -> None:
    for batch in (1, 2):  # batch 1 takes the gemv path, batch 2 the bmm path
        fused = torch.stack([a.mean(1) for a in _attention(B=batch)])  # (L, B, N, N)
        before = fused.clone()
        for ratio in (0.0, 0.3):
            prepared = PreparedRollout(fused, ratio)
            assert torch.equal(fused, before)
            for query in (0, 5, None):
                expected = _fresh_row(list(before), query, 1, ratio, 0)
                torch.testing.assert_close(prepared.row(query, 1), expected, rtol=0, atol=1e-12)
        handed = PreparedRollout(fused, 0.0, reuse=True)  # Ã_l built in the given memory
        assert handed.normalized.data_ptr() == fused.data_ptr()
        expected = _fresh_row(list(before), 3, 1, 0.0, 0)
        torch.testing.assert_close(handed.row(3, 1), expected, rtol=0, atol=1e-12)


def test_analysis_reuses_preparations_for_new_queries(tiny_ckpt) -> None:
    from vitviz.checkpoints import load_checkpoint

    loaded = load_checkpoint(tiny_ckpt)
    a = analyze(loaded, torch.randn(3, 32, 32))
    layers = [x.float()[None] for x in a.attention]
    for patch in (None, (0, 0), (3, 2), (1, 3)):
        q = a.query_token(patch)
        expected = explain.rollout(layers, a.grid, a.num_prefix_tokens, q, "max", None, 0.3, 1)
        torch.testing.assert_close(a.rollout(patch, "max", None, 0.3, 1), expected[0])
    assert len(a._rollouts) == 1  # one preparation for all those queries
    for ratio in (0.0, 0.1, 0.2, 0.5, 0.6):
        a.rollout(None, "mean", None, ratio)
    assert len(a._rollouts) == ROLLOUT_CACHE_SIZE


def test_gradients_up_front_equal_gradients_on_request(tiny_ckpt) -> None:
    """analyze(gradients=True) keeps the top class's gradients from its one pass; the maps and
    numbers equal those of the lazy path (a second forward + backward on request)."""
    from vitviz.checkpoints import load_checkpoint

    loaded = load_checkpoint(tiny_ckpt)
    x = torch.randn(3, 32, 32, generator=torch.Generator().manual_seed(3))
    lazy = analyze(loaded, x)
    eager = analyze(loaded, x, gradients=True)
    assert list(eager._products) == [lazy.top_class]  # computed during analyze
    assert lazy._products == {}
    torch.testing.assert_close(eager.logits, lazy.logits)
    torch.testing.assert_close(eager.attention, lazy.attention)
    torch.testing.assert_close(eager.token_norms, lazy.token_norms)
    torch.testing.assert_close(eager.mean_distance, lazy.mean_distance)
    torch.testing.assert_close(eager.relevance(), lazy.relevance())
    torch.testing.assert_close(
        eager.gradient_rollout(patch=(1, 1)), lazy.gradient_rollout(patch=(1, 1))
    )
