"""analyze(): the one entry point. Its numbers are the model's; maps come later, on demand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import skimage.data
import torch
from conftest import CLASS_NAMES
from PIL import Image

import vitviz.explain
import vitviz.kinds.vit.analysis
import vitviz.kinds.vit.capture
from vitviz.checkpoints import LoadedModel, load_checkpoint
from vitviz.imaging import Preprocessing, load_image, prepare_image
from vitviz.pipeline.analysis import analyze


@pytest.fixture
def loaded(tiny_ckpt: Path) -> LoadedModel:
    return load_checkpoint(tiny_ckpt)


@pytest.fixture(scope="module")
def chelsea() -> Image.Image:
    return Image.fromarray(skimage.data.chelsea())  # 451 × 300, landscape


FIT = Preprocessing(image_size=(32, 32), resize="fit")


def _x(seed: int = 0, size: tuple[int, int] = (32, 32)) -> torch.Tensor:
    return torch.randn(3, *size, generator=torch.Generator().manual_seed(seed))


def _grads(model, x: torch.Tensor, c: int) -> list[torch.Tensor]:
    """∂y_c/∂A_l for every layer, written here independently of vitviz.explain."""
    with torch.enable_grad():
        out = model.forward_explained(x[None].requires_grad_(True), capture_attention=True)
        return list(torch.autograd.grad(out.logits[0, c], out.attentions))


# -- the forward pass --------------------------------------------------------------------------


def test_logits_and_attention_are_the_models(loaded: LoadedModel) -> None:
    x = _x()
    a = analyze(loaded, x)
    with torch.no_grad():
        expected = loaded.model(x[None])[0]
        out = loaded.model.forward_explained(x[None], capture_attention=True)
    torch.testing.assert_close(a.logits, expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(a.attention, torch.stack([t[0] for t in out.attentions]))
    # Logits of the two paths may differ by 1e-5; their softmax then by 2e-5 of each p.
    torch.testing.assert_close(a.probs, expected.softmax(-1), atol=1e-7, rtol=2e-5)
    assert a.logits.dtype == a.probs.dtype == a.attention.dtype == torch.float32
    assert a.attention.shape == (2, 2, 17, 17)  # L, H, 1 + 4·4, 1 + 4·4
    torch.testing.assert_close(a.attention.sum(-1), torch.ones(2, 2, 17))
    assert a.grid == (4, 4)
    assert a.num_prefix_tokens == 1
    assert torch.equal(a.input, x)
    assert a.mean_distance.shape == a.entropy.shape == (2, 2)
    # A batched (1, 3, H, W) tensor is the same image.
    assert torch.equal(analyze(loaded, x[None]).logits, a.logits)


def test_attention_can_be_stored_in_half_precision(loaded: LoadedModel) -> None:
    x = _x(1)
    full = analyze(loaded, x)
    half = analyze(loaded, x, attention_dtype=torch.float16)
    assert half.attention.dtype == torch.float16
    torch.testing.assert_close(half.attention.float(), full.attention, atol=1e-3, rtol=0)
    torch.testing.assert_close(half.logits, full.logits)


def test_pil_image_equals_the_prepared_tensor(loaded: LoadedModel, chelsea: Image.Image) -> None:
    prepared = prepare_image(load_image(chelsea), loaded.preprocessing, 8)
    from_pil = analyze(loaded, chelsea)
    from_tensor = analyze(loaded, prepared.tensor)
    assert torch.equal(from_pil.input, prepared.tensor)
    torch.testing.assert_close(from_pil.logits, from_tensor.logits, atol=1e-6, rtol=0)
    torch.testing.assert_close(from_pil.attention, from_tensor.attention, atol=1e-6, rtol=0)
    np.testing.assert_array_equal(from_pil.pixels, prepared.pixels)
    assert from_pil.source is not None and from_pil.source.size == chelsea.size
    assert from_tensor.source is None


def test_path_and_array_inputs_equal_the_pil_image(
    loaded: LoadedModel, photo_files: dict[str, Path]
) -> None:
    path = photo_files["chelsea"]  # PNG, lossless
    by_path = analyze(loaded, path)
    by_array = analyze(loaded, np.asarray(Image.open(path).convert("RGB")))
    assert torch.equal(by_path.input, by_array.input)
    assert torch.equal(by_path.logits, by_array.logits)


def test_top_k_is_sorted_and_named_from_the_checkpoint(loaded: LoadedModel) -> None:
    a = analyze(loaded, _x(2))
    top = a.top_k(5)
    assert len(top) == 5
    probs = [p.probability for p in top]
    assert probs == sorted(probs, reverse=True)
    assert sum(probs) == pytest.approx(1.0, abs=1e-5)
    assert float(a.probs.sum()) == pytest.approx(1.0, abs=1e-6)
    assert sorted(p.index for p in top) == list(range(5))
    for p in top:
        assert p.name == CLASS_NAMES[p.index]
        assert p.logit == pytest.approx(float(a.logits[p.index]))
        assert p.probability == pytest.approx(float(a.probs[p.index]))
    assert top[0].index == int(a.logits.argmax())
    assert [p.index for p in a.top_k(2)] == [p.index for p in top[:2]]
    assert len(a.top_k(50)) == 5


# -- maps on a non-square input ----------------------------------------------------------------


def test_maps_follow_a_non_square_grid(loaded: LoadedModel, chelsea: Image.Image) -> None:
    a = analyze(loaded, chelsea, preprocessing=FIT)
    gh, gw = a.grid
    assert gw > gh  # landscape photo kept landscape
    assert a.input.shape == (3, gh * 8, gw * 8)
    N = 1 + gh * gw
    assert a.attention.shape == (2, 2, N, N)
    assert a.rollout().shape == (gh, gw)
    assert a.rollout(patch=(gh - 1, gw - 1), fusion="max", discard_ratio=0.5).shape == (gh, gw)
    assert a.relevance().shape == (gh, gw)
    assert a.gradient_rollout().shape == (gh, gw)
    assert a.dino_masks().shape == (2, gh, gw)
    assert a.attention_maps(0).shape == (2, gh, gw)
    assert a.attention_maps(1, patch=(0, gw - 1)).shape == (2, gh, gw)
    assert a.all_attention_maps().shape == (2, 2, gh, gw)
    for m in (a.rollout(), a.relevance(), a.gradient_rollout()):
        assert torch.isfinite(m).all()
        assert float(m.max()) == pytest.approx(1.0)


def test_non_square_tensor_input(loaded: LoadedModel) -> None:
    a = analyze(loaded, _x(3, (16, 40)))
    assert a.grid == (2, 5)
    assert a.rollout().shape == (2, 5)
    assert a.relevance(target_class=1).shape == (2, 5)
    assert a.gradient_rollout(target_class=1).shape == (2, 5)
    assert a.dino_masks(layer=0, threshold=0.3).shape == (2, 2, 5)


def test_raw_attention_maps_are_the_cls_row(loaded: LoadedModel) -> None:
    a = analyze(loaded, _x(4, (16, 40)))
    maps = a.attention_maps(1)
    expected = a.attention[1, :, 0, 1:].reshape(2, 2, 5)
    torch.testing.assert_close(maps, expected)
    # Patch (1, 3) is token 1 + 1·5 + 3 = 9.
    torch.testing.assert_close(
        a.attention_maps(0, patch=(1, 3)), a.attention[0, :, 9, 1:].reshape(2, 2, 5)
    )
    torch.testing.assert_close(a.all_attention_maps()[1], maps)


def test_rollout_matches_the_definition(loaded: LoadedModel) -> None:
    """DESIGN §5, written out with full matrices: R = Ã_L ⋯ Ã_s, map = R[q, patches] / max."""
    a = analyze(loaded, _x(5, (16, 40)))
    A = a.attention.double()
    N = A.shape[-1]
    eye = torch.eye(N, dtype=torch.float64)

    def expected(fuse, start: int = 0, q: int = 0) -> torch.Tensor:
        R = eye
        for layer in range(start, A.shape[0]):
            t = fuse(A[layer]) + eye
            R = (t / t.sum(-1, keepdim=True)) @ R
        m = R[q, 1:].reshape(2, 5)
        return (m / m.max()).float()

    torch.testing.assert_close(a.rollout(), expected(lambda x: x.mean(0)))
    torch.testing.assert_close(a.rollout(fusion="max"), expected(lambda x: x.amax(0)))
    torch.testing.assert_close(
        a.rollout(fusion="min", start_layer=1), expected(lambda x: x.amin(0), start=1)
    )
    torch.testing.assert_close(a.rollout(patch=(1, 2)), expected(lambda x: x.mean(0), q=8))


def test_relevance_and_gradient_rollout_match_the_definitions(loaded: LoadedModel) -> None:
    x = _x(6, (16, 40))
    a = analyze(loaded, x)
    c = int(a.logits.argmin())  # not the default class, so the target really is used
    A = a.attention.double()
    G = [g[0].double() for g in _grads(loaded.model, x, c)]
    N = A.shape[-1]
    eye = torch.eye(N, dtype=torch.float64)

    R = eye
    for layer in range(A.shape[0]):
        R = R + (G[layer] * A[layer]).clamp_min(0).mean(0) @ R
    rel = R[0, 1:].reshape(2, 5)
    rel = (rel - rel.min()) / (rel.max() - rel.min())
    torch.testing.assert_close(a.relevance(c), rel.float(), atol=1e-5, rtol=1e-4)

    R = eye
    for layer in range(A.shape[0]):
        t = (A[layer] * G[layer]).mean(0).clamp_min(0) + eye
        R = (t / t.sum(-1, keepdim=True)) @ R
    groll = R[0, 1:].reshape(2, 5)
    torch.testing.assert_close(
        a.gradient_rollout(c), (groll / groll.max()).float(), atol=1e-5, rtol=1e-4
    )


def test_dino_masks_hold_the_threshold_of_mass(loaded: LoadedModel) -> None:
    a = analyze(loaded, _x(7, (16, 40)))
    masks = a.dino_masks(layer=-1, threshold=0.6)
    cls = a.attention[-1, :, 0, 1:].reshape(2, 2, 5)
    for h in range(2):
        m = masks[h].bool()
        share = float(cls[h][m].sum() / cls[h].sum())
        assert share >= 0.6 - 1e-6
        # The smallest such set: dropping its weakest patch falls below the threshold.
        weakest = float(cls[h][m].min())
        assert (share - weakest / float(cls[h].sum())) < 0.6


# -- gradient methods are lazy and cached ------------------------------------------------------


def test_gradients_only_when_asked_and_cached_per_class(
    loaded: LoadedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    real = vitviz.kinds.vit.analysis.reduced_gradient_pass  # the maps' gradient pass (reduced)

    def counting(model, x, target, attention_of, **kwargs):
        calls.append(int(target))
        return real(model, x, target, attention_of, **kwargs)

    monkeypatch.setattr(vitviz.kinds.vit.analysis, "reduced_gradient_pass", counting)
    # the lean pass, as for a graph past the memory plan (the tiny model's fits: kept)
    monkeypatch.setattr(vitviz.kinds.vit.capture, "SMALL_GRAPH", 0)
    a = analyze(loaded, _x(8))
    a.rollout()
    a.dino_masks()
    a.all_attention_maps()
    assert calls == []

    top = a.top_class
    first = a.relevance()
    assert calls == [top]
    again = a.relevance()
    assert calls == [top]
    assert torch.equal(first, again)
    a.gradient_rollout(top)  # same class: same gradients
    a.relevance(target_class=top, start_layer=1)
    assert calls == [top]

    other = (top + 1) % 5
    a.relevance(other)
    assert calls == [top, other]
    a.gradient_rollout(other)
    assert calls == [top, other]


@pytest.mark.parametrize("bad", [5, 17, -1])
def test_class_out_of_range_is_a_clear_value_error(loaded: LoadedModel, bad: int) -> None:
    a = analyze(loaded, _x(9))
    with pytest.raises(ValueError, match=rf"class {bad} is out of range.*5 classes"):
        a.relevance(bad)
    with pytest.raises(ValueError, match="out of range"):
        a.gradient_rollout(bad)


def test_patch_outside_the_grid_is_a_value_error(loaded: LoadedModel) -> None:
    a = analyze(loaded, _x(10, (16, 40)))
    with pytest.raises(ValueError, match="outside"):
        a.attention_maps(0, patch=(2, 0))
    with pytest.raises(ValueError, match="outside"):
        a.rollout(patch=(0, 5))


def test_bad_tensor_shape_is_a_value_error(loaded: LoadedModel) -> None:
    with pytest.raises(ValueError, match=r"\(3, H, W\)"):
        analyze(loaded, torch.zeros(32, 32))
