"""Head statistics made from the kept attention when first read: the definition's numbers, the
capture's numbers exactly, and nothing paid by an analysis that never reads them."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from conftest import CLASS_NAMES, random_vit

from vitviz.checkpoints import LoadedModel
from vitviz.explain.stats import patch_distances
from vitviz.imaging import Preprocessing
from vitviz.kinds.vit.batch import analyze_batch
from vitviz.kinds.vit.head_stats import HeadStats, layer_statistics
from vitviz.pipeline.analysis import analyze

SIZE = (24, 40)  # 3 × 5 patches of 8: not square on purpose


@pytest.fixture(scope="module")
def loaded() -> LoadedModel:
    model = random_vit(3, image_size=SIZE, num_register_tokens=1)  # 2 prefix tokens
    return LoadedModel(model, CLASS_NAMES, Preprocessing(image_size=SIZE), "vitviz")


def _x(seed: int) -> torch.Tensor:
    return torch.randn(3, *SIZE, generator=torch.Generator().manual_seed(seed))


def reference(attention: torch.Tensor, grid: tuple[int, int], P: int, patch: int) -> torch.Tensor:
    """(3, L, H) float64 from the definitions (DESIGN §5), a loop over the patch queries:
    Σ_k A[q,k]·‖pos_q − pos_k‖·patch over patch keys; −Σ_k A[q,k]·log A[q,k] over all keys;
    Σ_{k<P} A[q,k]; each the mean over the patch queries q."""
    a = attention.double()
    L, H, N, _ = a.shape
    gw = grid[1]
    out = torch.zeros(3, L, H, dtype=torch.float64)
    for q in range(P, N):
        qr, qc = divmod(q - P, gw)
        row = a[:, :, q, :]  # (L, H, N)
        for k in range(P, N):
            kr, kc = divmod(k - P, gw)
            out[0] += row[..., k] * patch * ((qr - kr) ** 2 + (qc - kc) ** 2) ** 0.5
        out[1] -= torch.where(row > 0, row * row.log(), torch.zeros_like(row)).sum(-1)
        out[2] += row[..., :P].sum(-1)
    return out / (N - P)


def _stats(a) -> torch.Tensor:
    return torch.stack([a.mean_distance, a.entropy, a.prefix_share])


def test_statistics_are_made_when_first_read_and_match_their_definitions(loaded) -> None:
    a = analyze(loaded, _x(0))
    a.rollout(), a.all_attention_maps()  # the maps read only the attention
    assert not a.head_stats.made
    got = _stats(a)
    assert a.head_stats.made and got.dtype == torch.float32 and got.device.type == "cpu"
    assert got.shape == (3, a.num_layers, a.num_heads)
    want = reference(a.attention, a.grid, a.num_prefix_tokens, a.patch_size)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    assert torch.equal(a.head_stats.values, got)  # kept, not made again


def test_lazy_statistics_equal_the_captures_to_the_last_bit(loaded) -> None:
    """The same calls on the model's own captured layers give exactly the lazy numbers, and so
    does a half-precision analysis, whose statistics are taken in the capture."""
    x = _x(1)
    a = analyze(loaded, x)
    with torch.inference_mode():
        out = loaded.model.forward_explained(x[None], capture_attention=True)
    dist = patch_distances(a.grid, a.patch_size, out.attentions[0][:0])
    P = a.num_prefix_tokens
    direct = torch.stack(
        [layer_statistics(t, a.grid, P, a.patch_size, dist)[:, 0] for t in out.attentions], 1
    )
    assert torch.equal(_stats(a), direct)
    half = analyze(loaded, x, attention_dtype=torch.float16)
    assert half.head_stats.made  # taken from the float32 layers, not from the rounded copy
    assert torch.equal(_stats(half), _stats(a))


def test_kept_layers_batches_and_copies_keep_their_statistics(loaded) -> None:
    images = [_x(2), _x(3)]
    batch = analyze_batch(loaded, images, batch_size=2)
    for image, b in zip(images, batch, strict=True):
        one = analyze(loaded, image)
        want = reference(one.attention, one.grid, one.num_prefix_tokens, one.patch_size)
        torch.testing.assert_close(_stats(b).double(), want, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(_stats(b), _stats(one), rtol=1e-6, atol=1e-6)
    last = analyze(loaded, images[0], layers=[1])
    torch.testing.assert_close(_stats(last), _stats(batch[0])[:, 1:], rtol=1e-6, atol=1e-6)
    # a kind's own numbers (a CaiT's) replace a row in this analysis alone
    a = analyze(loaded, images[0])
    copy = dataclasses.replace(a)
    before = a.entropy.clone()
    a.entropy = torch.full_like(before, 7.0)
    assert bool((a.entropy == 7.0).all()) and torch.equal(copy.entropy, before)
    assert torch.equal(a.mean_distance, copy.mean_distance)


def test_statistics_need_a_float32_attention_or_values() -> None:
    with pytest.raises(ValueError, match="float32"):
        HeadStats(None, torch.zeros(1, 1, 3, 3, dtype=torch.float16))
    assert HeadStats.given(torch.ones(3, 1, 2)).made
