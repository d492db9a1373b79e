"""The analysis lives on its device: maps computed where the forward
pass ran equal the CPU's; only maps cross to the host; attention kept in half precision stays
within the precision it states; a run that would not fit is refused naming the choices."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from vitviz import explain
from vitviz.checkpoints import LoadedModel, load_checkpoint
from vitviz.explain.methods import all_methods
from vitviz.kinds.vit.memory import check_analysis_memory, estimate_analysis
from vitviz.pipeline.analysis import NotEnoughMemoryError, analyze
from vitviz.pipeline.attention_dtype import (
    ATTENTION_ABSOLUTE,
    ATTENTION_PRECISION,
    attention_precision_text,
)
from vitviz.pipeline.memory import BUDGET_ENV

DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=[
            pytest.mark.gpu,
            pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
        ],
    ),
]
QUERIES = [None, (1, 2)]


@pytest.fixture
def loaded(tiny_ckpt: Path) -> LoadedModel:
    return load_checkpoint(tiny_ckpt)


def _x(seed: int = 0) -> torch.Tensor:
    return torch.randn(3, 32, 32, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("device", DEVICES)
def test_the_device_path_gives_the_cpu_results(loaded: LoadedModel, device: str) -> None:
    cpu = analyze(loaded, _x(), device="cpu", gradients=True)
    dev = analyze(loaded, _x(), device=device, gradients=True)
    assert dev.attention.device.type == device  # the analysis stays where it ran
    assert {g.device.type for g in dev.gradients()} == {device}
    assert dev.logits.device.type == "cpu"  # the numbers shown are on the host
    torch.testing.assert_close(dev.logits, cpu.logits, atol=1e-5, rtol=0)
    for name in ("mean_distance", "entropy", "prefix_share", "token_norms"):
        torch.testing.assert_close(getattr(dev, name), getattr(cpu, name), atol=1e-4, rtol=1e-5)
    for q in QUERIES:
        for m in all_methods():
            if m.unavailable(cpu) is not None:
                continue
            a, b = m(dev, q), m(cpu, q)
            assert a.device.type == "cpu" and a.shape[:2] == cpu.grid
            tol = 1e-4 if m.needs_gradients else 1e-5  # relevance within 1e-4, maps 1e-5
            # (token norms are not scaled to [0, 1]: float32's relative precision holds them)
            torch.testing.assert_close(a, b, atol=tol, rtol=1e-5, msg=f"{m.name} at {q}")
        head, mean, prefix = dev.host_query_maps(q)
        np.testing.assert_allclose(head, cpu.all_attention_maps(q).numpy(), atol=1e-5)
        np.testing.assert_allclose(mean, head.mean(axis=1), atol=1e-6)
        np.testing.assert_allclose(prefix, cpu.prefix_attention(q).numpy(), atol=1e-5)
    np.testing.assert_allclose(dev.attention_numpy(), cpu.attention.numpy(), atol=1e-5)


def test_only_maps_cross_to_the_host(loaded: LoadedModel, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every host copy made while maps are asked for is map-sized: no (L, H, N, N) attention,
    gradient or N × N matrix goes through .cpu() or .numpy(); export alone copies it."""
    a = analyze(loaded, _x(), gradients=True)
    L, H, N, _ = a.attention.shape
    gh, gw = a.grid
    copied: list[int] = []
    real_cpu, real_numpy = torch.Tensor.cpu, torch.Tensor.numpy

    def cpu(self, *args, **kwargs):
        copied.append(self.numel())
        return real_cpu(self, *args, **kwargs)

    def numpy(self, *args, **kwargs):
        copied.append(self.numel())
        return real_numpy(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "cpu", cpu)
    monkeypatch.setattr(torch.Tensor, "numpy", numpy)
    for q in QUERIES:
        for m in all_methods():
            m(a, q)
        a.host_query_maps(q)
        a.all_attention_maps(q)
        a.dino_masks(-1, 0.6, q)
    assert copied, "no map crossed to the host"
    largest_map = L * H * gh * gw + L * gh * gw + L * H * a.num_prefix_tokens
    assert max(copied) <= largest_map < L * H * N * N
    copied.clear()
    a.attention_numpy()  # export: the one time the attention crosses
    assert max(copied) == L * H * N * N


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
def test_half_precision_attention_stays_within_the_precision_it_states(
    loaded: LoadedModel, dtype: torch.dtype
) -> None:
    full = analyze(loaded, _x(3), gradients=True)
    half = analyze(loaded, _x(3), gradients=True, attention_dtype=dtype)
    eps = ATTENTION_PRECISION[dtype]
    assert half.attention.dtype == dtype and half.attention_dtype == dtype
    assert f"{eps:.1e}" in half.attention_precision == attention_precision_text(dtype)
    exact = full.attention
    error = (half.attention.float() - exact).abs()
    tiny = ATTENTION_ABSOLUTE[dtype]  # float16's subnormals: absolute
    assert bool((error <= eps * exact + tiny + 1e-30).all())  # each entry, relatively
    # the statistics come from the float32 capture: the same
    torch.testing.assert_close(half.mean_distance, full.mean_distance)
    L = full.num_layers
    for q in QUERIES:
        torch.testing.assert_close(half.all_attention_maps(q), full.all_attention_maps(q),
                                   atol=eps, rtol=0)  # fmt: skip
        # max-scaled rollouts: each layer's rounding compounds, 4·eps per layer at most
        torch.testing.assert_close(half.rollout(q), full.rollout(q), atol=4 * L * eps, rtol=0)
        torch.testing.assert_close(
            half.gradient_rollout(None, q), full.gradient_rollout(None, q), atol=4 * L * eps, rtol=0
        )
    assert not torch.equal(half.rollout(), full.rollout()) or dtype == torch.float32


def test_half_precision_is_refused_for_other_types(loaded: LoadedModel) -> None:
    with pytest.raises(ValueError, match="float32, float16, bfloat16"):
        analyze(loaded, _x(), attention_dtype=torch.int8)


def test_a_run_that_would_not_fit_is_refused_naming_the_choices(
    loaded: LoadedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    size = (256, 256)
    full = estimate_analysis(loaded.config, size).needed
    half = estimate_analysis(loaded.config, size, attention_bytes=2).needed
    assert half < full
    budget = int((half + full) / 2 / 0.9)  # half precision fits, float32 does not
    monkeypatch.setenv(BUDGET_ENV, str(budget))
    x = torch.zeros(3, *size)
    with pytest.raises(NotEnoughMemoryError) as info:
        analyze(loaded, x)
    msg = str(info.value)
    assert "\n" not in msg and "half precision (--attention-dtype float16" in msg
    assert "--device cpu" not in msg  # already on the CPU
    a = analyze(loaded, x, attention_dtype=torch.float16)  # the choice it named runs
    assert a.attention.dtype == torch.float16 and a.grid == (32, 32)
    # on a GPU (simulated: the budget stands for its free memory) the CPU is a choice too
    with pytest.raises(NotEnoughMemoryError, match=r"the CPU \(--device cpu\)"):
        check_analysis_memory(loaded.model, size, device="cuda")
    with pytest.raises(NotEnoughMemoryError, match=r"fewer images at once \(--batch-size\)"):
        check_analysis_memory(loaded.model, (64, 64), attention_dtype=torch.float16, batch=10_000)


def test_gradients_reduced_in_the_backward_pass_equal_those_reduced_from_full_gradients(
    loaded: LoadedModel,
) -> None:
    x = torch.stack([_x(5), _x(6), _x(7)])  # a batch: each image its own top class
    full = explain.attention_gradients(loaded.model, x)
    reduced = explain.attention_gradient_products(loaded.model, x)
    assert torch.equal(reduced.target, full.target)
    A, G = full.attentions, full.gradients
    L, H = len(A), A[0].shape[1]
    p = reduced.products
    torch.testing.assert_close(
        p.weighted, torch.stack([(a * g).mean(1) for a, g in zip(A, G, strict=True)])
    )
    torch.testing.assert_close(
        p.positive, torch.stack([(a * g).clamp_min(0).mean(1) for a, g in zip(A, G, strict=True)])
    )
    gsam = sum((g.clamp_min(0) * a).sum(1) for a, g in zip(A, G, strict=True)) / (L * H)
    torch.testing.assert_close(p.grad_sam, gsam)
    torch.testing.assert_close(p.last, G[-1])
    one = explain.attention_gradient_products(loaded.model, x[1:2]).products
    torch.testing.assert_close(p.image(1).weighted, one.weighted, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(p.image(1).last, one.last, atol=1e-6, rtol=1e-5)


def test_the_gradient_pass_recomputes_blocks_only_where_memory_asks(
    loaded: LoadedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both gradient passes give the same maps; the lean one (each block recomputed in the
    backward pass) is chosen for a big model, the fast one where the graph fits the plan."""
    from vitviz.blocks import create_model
    from vitviz.kinds.vit import capture

    with torch.device("meta"):  # shapes only: no 300M weights in a test
        large = create_model("vit-large", image_size=518, patch_size=14)
        base = create_model("vit-base")
        x518, x224 = torch.empty(1, 3, 518, 518), torch.empty(1, 3, 224, 224)
    assert capture.recompute_pays(large, x518)
    assert not capture.recompute_pays(base, x224)
    with torch.device("meta"):  # a tiny model: its activations outweigh weights and attention,
        tiny = create_model("vit-tiny")  # but its whole graph is small: kept, not recomputed
    assert not capture.recompute_pays(tiny, x224)
    monkeypatch.setattr(capture, "SMALL_GRAPH", 0)
    assert capture.recompute_pays(tiny, x224)  # (it was, by the ratio alone)
    monkeypatch.undo()
    maps = {}
    calls: list[str] = []
    real = capture._capture_with_gradients

    def spy(*args, **kwargs):
        calls.append("lean")
        return real(*args, **kwargs)

    monkeypatch.setattr(capture, "_capture_with_gradients", spy)
    for limit, name in ((0.0, "lean"), (1e9, "fast")):
        monkeypatch.setattr(capture, "PEAK_LIMIT", limit)
        monkeypatch.setattr(capture, "SMALL_GRAPH", 0)  # the tiny test model's graph is small
        calls.clear()
        a = analyze(loaded, _x(11), gradients=True)
        assert calls == (["lean"] if name == "lean" else [])
        later = a.relevance(target_class=(a.top_class + 1) % 5)  # a later pass, same choice
        maps[name] = [a.relevance(), a.gradient_rollout(), later, a.attention]
    for lean, fast in zip(maps["lean"], maps["fast"], strict=True):
        torch.testing.assert_close(lean, fast, atol=1e-5, rtol=1e-5)


def test_a_gpu_computes_in_full_float32() -> None:
    """TF32 convolutions (PyTorch's default on CUDA) moved a PVT v2's logits by 4e-3 on an H200:
    a CUDA device vitviz uses turns them off; the CPU leaves the flags alone."""
    from vitviz.core.devices import full_float32

    saved = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
    try:
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = True
        full_float32(torch.device("cpu"))
        assert torch.backends.cudnn.allow_tf32 and torch.backends.cuda.matmul.allow_tf32
        full_float32(torch.device("cuda"))
        assert not torch.backends.cudnn.allow_tf32
        assert not torch.backends.cuda.matmul.allow_tf32
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved
