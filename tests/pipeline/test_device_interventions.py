"""Interventions, feature maps and compare on a GPU (DESIGN §5): knocking heads out, every
head's effect, patching, the feature methods and a comparison of two models, run with the model
on CUDA, equal the CPU's. A ViT and a Swin (windows, padding, stage grids). Skipped, with its
reason, where there is no CUDA device (CI); the CPU side of each is the pipeline's own tests."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch
from conftest import CLASS_NAMES, random_vit
from safetensors.torch import save_file
from swin_helpers import tiny_timm_swin
from zoo_helpers import images

from vitviz.checkpoints import LoadedModel, load_checkpoint
from vitviz.explain.methods import all_methods
from vitviz.imaging import Preprocessing
from vitviz.pipeline.analysis import analyze
from vitviz.pipeline.compare import compare_analyses
from vitviz.pipeline.head_effects import head_effects, patching_effects

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
SWIN_SIZE = (32, 32)


def _on_cuda(loaded: LoadedModel) -> LoadedModel:
    moved = copy.copy(loaded)
    moved.model = copy.deepcopy(loaded.model).to("cuda")
    return moved


def _vit(seed: int = 0) -> LoadedModel:
    return LoadedModel(random_vit(seed=seed), CLASS_NAMES, Preprocessing(image_size=(32, 32)),
                       "vitviz")  # fmt: skip


@pytest.fixture(scope="module")
def swin(tmp_path_factory) -> LoadedModel:
    ref = tiny_timm_swin(SWIN_SIZE, window=4, seed=11).eval()
    folder = tmp_path_factory.mktemp("swin")
    path = folder / "model.safetensors"
    save_file({k: v.contiguous() for k, v in ref.state_dict().items()}, str(path))
    side = {"preprocessing": {"image_size": list(SWIN_SIZE)}}
    (folder / "model.safetensors.vitviz.json").write_text(json.dumps(side))
    return load_checkpoint(path)


@pytest.fixture(params=["vit", "swin"])
def loaded(request, swin) -> LoadedModel:
    return _vit() if request.param == "vit" else swin


def test_knocked_out_heads_on_cuda_give_the_cpu_results(loaded: LoadedModel) -> None:
    x = images(1, 32, 32, seed=3)[0]
    heads = [(0, 1), (1, 0)]
    for mode in ("zero", "mean"):
        cpu = analyze(loaded, x, ablate=heads, ablation=mode)
        gpu = analyze(_on_cuda(loaded), x, ablate=heads, ablation=mode)
        torch.testing.assert_close(gpu.logits.cpu(), cpu.logits.cpu(), atol=1e-4, rtol=1e-4)
        clean = analyze(loaded, x)
        assert not torch.allclose(cpu.logits.cpu(), clean.logits.cpu(), atol=1e-4), mode


def test_head_effects_and_patching_on_cuda_give_the_cpu_effects(loaded: LoadedModel) -> None:
    a, b = images(2, 32, 32, seed=4)
    gpu_loaded = _on_cuda(loaded)
    for mode in ("zero", "mean"):
        cpu, gpu = head_effects(loaded, a, mode=mode), head_effects(gpu_loaded, a, mode=mode)
        assert gpu.target == cpu.target
        np.testing.assert_allclose(gpu.effect.numpy(), cpu.effect.numpy(), atol=1e-4, rtol=1e-4)
        assert np.nanmax(np.abs(cpu.effect.numpy())) > 1e-3  # the heads matter: a real check
    cpu_p, gpu_p = patching_effects(loaded, a, b), patching_effects(gpu_loaded, a, b)
    np.testing.assert_allclose(gpu_p.effect.numpy(), cpu_p.effect.numpy(), atol=1e-3, rtol=1e-3)


def test_feature_maps_on_cuda_give_the_cpu_maps(loaded: LoadedModel) -> None:
    x = images(1, 32, 32, seed=6)[0]
    cpu = analyze(loaded, x)
    gpu = analyze(_on_cuda(loaded), x)
    compared = 0
    for method in all_methods():
        if method.name not in ("token-norm", "similarity", "pca"):
            continue
        if method.unavailable(cpu) is not None:
            continue
        want, got = method(cpu, None, None, {}), method(gpu, None, None, {})
        torch.testing.assert_close(got.cpu().float(), want.cpu().float(), atol=1e-4, rtol=1e-4,
                                   msg=lambda m, n=method.name: f"{n}: {m}")  # fmt: skip
        compared += 1
    assert compared == 3


def test_compare_on_cuda_gives_the_cpu_comparison() -> None:
    x = images(1, 32, 32, seed=7)[0]
    a, b = _vit(0), _vit(1)
    cpu = compare_analyses(a, analyze(a, x), b, analyze(b, x))
    ga, gb = _on_cuda(a), _on_cuda(b)
    gpu = compare_analyses(ga, analyze(ga, x), gb, analyze(gb, x))
    np.testing.assert_allclose(gpu.head_similarity, cpu.head_similarity, atol=1e-5)
    np.testing.assert_allclose(gpu.rollout_a, cpu.rollout_a, atol=1e-5)
    np.testing.assert_allclose(gpu.logits_b, cpu.logits_b, atol=1e-4, rtol=1e-4)


def test_a_gpu_batches_heads_of_several_layers_and_gives_the_cpu_effects(loaded) -> None:
    """On CUDA the default plan puts heads of several layers in one pass (fewer passes, fewer
    layer runs than a pass per layer); its effects and patching equal the CPU's per-layer
    plan's, zero and mean."""
    from vitviz.pipeline.head_effects import full_pass, pass_plan
    from vitviz.pipeline.interventions import model_input

    a, b = images(2, 32, 32, seed=8)
    gpu_loaded = _on_cuda(loaded)
    x = model_input(gpu_loaded, a)
    base, _ = full_pass(gpu_loaded.kind, gpu_loaded.model, x)
    gpu_plan, cpu_plan = pass_plan(x, base), pass_plan(x.cpu(), base, plan="per-layer")
    assert any(len({layer for layer, _ in p}) > 1 for p in gpu_plan.passes)
    assert gpu_plan.layer_runs < cpu_plan.layer_runs and len(gpu_plan.passes) < len(cpu_plan.passes)
    for mode in ("zero", "mean"):
        cpu = head_effects(loaded, a, mode=mode, plan="per-layer")
        gpu = head_effects(gpu_loaded, a, mode=mode)
        forced = head_effects(gpu_loaded, a, mode=mode, plan="multi-layer", batch=3)
        for got in (gpu, forced):
            np.testing.assert_allclose(got.effect.numpy(), cpu.effect.numpy(), atol=1e-4,
                                       rtol=1e-4)  # fmt: skip
    cpu_p = patching_effects(loaded, a, b, plan="per-layer")
    gpu_p = patching_effects(gpu_loaded, a, b)
    np.testing.assert_allclose(gpu_p.effect.numpy(), cpu_p.effect.numpy(), atol=1e-3, rtol=1e-3)
