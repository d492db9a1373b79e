"""Memory planned before an analysis: an image size whose analysis would not fit
is refused with the size, the tokens and the memory needed vs free, before anything big is
allocated; the estimate is an upper bound within 2× of the measured peak."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from checkpoint_cases import photo, tv_checkpoint

from vitviz.blocks import ViTConfig
from vitviz.checkpoints import load_checkpoint
from vitviz.imaging import Preprocessing
from vitviz.kinds.vit.memory import check_analysis_memory, estimate_analysis, estimate_for_model
from vitviz.pipeline import memory
from vitviz.pipeline.analysis import NotEnoughMemoryError, analyze
from vitviz.pipeline.memory import (
    BUDGET_ENV,
    available_memory,
    parse_bytes,
)

REPO = Path(__file__).resolve().parents[2]
CONFIG = ViTConfig(image_size=32, patch_size=8, dim=32, depth=2, heads=2, num_classes=3)


def test_estimate_grows_with_the_square_of_the_tokens_and_with_gradients() -> None:
    small = estimate_analysis(CONFIG, (256, 256))
    large = estimate_analysis(CONFIG, (512, 512))
    assert (small.tokens, large.tokens) == (1 + 32 * 32, 1 + 64 * 64)
    assert small.attention == 4 * 2 * 2 * small.tokens**2
    assert 14 < large.peak / small.peak < 17  # (4097 / 1025)² ≈ 16
    assert large.needed > large.peak and small.needed > small.peak  # slack and fixed overhead
    assert estimate_analysis(CONFIG, (512, 512), gradients=True).needed > large.needed
    # the case: 1024 px on the 32-px model is 16,385 tokens: 4.0 GiB of attention, and
    # the analysis with its maps needs more than twice that
    huge = estimate_analysis(CONFIG, (1024, 1024))
    assert huge.tokens == 16385 and huge.attention == 4 * 2 * 2 * 16385**2
    assert huge.needed > 2 * huge.attention > 8 * 2**30


@pytest.mark.parametrize(
    ("text", "value"),
    [("2G", 2 * 2**30), ("512M", 512 * 2**20), ("1.5g", int(1.5 * 2**30)), ("1000", 1000)],
)
def test_budget_sizes(text: str, value: int) -> None:
    assert parse_bytes(text) == value


def test_budget_from_the_environment_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BUDGET_ENV, "300M")
    assert available_memory("cpu") == 300 * 2**20
    monkeypatch.setenv(BUDGET_ENV, "lots")
    with pytest.raises(ValueError, match="not a size"):
        available_memory("cpu")
    monkeypatch.delenv(BUDGET_ENV)
    free = available_memory("cpu")  # the machine's own figure
    assert free is None or free > 0


def _model_with(tmp_path: Path, settings: dict):
    return load_checkpoint(tv_checkpoint(tmp_path, settings=settings))


def test_analyze_refuses_what_does_not_fit_before_preparing_the_image(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loaded = _model_with(tmp_path, {"preprocessing": {"image_size": 1024}})
    monkeypatch.setenv(BUDGET_ENV, "1G")

    def never(*args, **kwargs):
        raise AssertionError("the image was prepared before the memory check")

    monkeypatch.setattr("vitviz.kinds.vit.analysis.prepare_image", never)
    with pytest.raises(NotEnoughMemoryError) as info:
        analyze(loaded, photo(tmp_path))
    msg = str(info.value)
    assert "\n" not in msg and isinstance(info.value, ValueError)
    for words in ("input size 1024×1024", "16,385 tokens", "2 layers × 2 heads", "GB of memory"):
        assert words in msg
    assert "but 1.0 GB is free on this machine" in msg and "trained at 32×32" in msg
    assert info.value.estimate.needed > info.value.available


def test_the_same_image_size_runs_with_enough_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loaded = _model_with(tmp_path, {"preprocessing": {"image_size": 64}})
    needed = estimate_analysis(loaded.config, (64, 64)).needed
    monkeypatch.setenv(BUDGET_ENV, str(2 * needed))
    assert analyze(loaded, photo(tmp_path)).grid == (8, 8)
    monkeypatch.setenv(BUDGET_ENV, str(needed // 2))
    with pytest.raises(NotEnoughMemoryError):
        analyze(loaded, photo(tmp_path))


def test_tensor_inputs_and_gradient_passes_are_planned_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loaded = _model_with(tmp_path, {})
    analysis = analyze(loaded, torch.zeros(3, 32, 32))
    monkeypatch.setenv(BUDGET_ENV, "1K")
    with pytest.raises(NotEnoughMemoryError, match="its gradient pass needs"):
        analysis.gradients(1)
    with pytest.raises(NotEnoughMemoryError, match="input size 512×512"):
        analyze(loaded, torch.zeros(3, 512, 512))


def test_fewer_layers_are_offered_to_a_new_analysis_not_to_a_later_gradient_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between the one-layer and the every-layer estimate: an analysis is told how many layers
    fit; a gradient pass of an analysis that exists is not (it can't keep fewer now)."""
    model = _model_with(tmp_path, {}).model
    size = (256, 256)
    for kind in ({"gradients": True}, {"gradient_pass_only": True}):
        every = estimate_for_model(model, size, **kind).needed
        one = estimate_for_model(model, size, layers=1, **kind).needed
        assert one < every
        free = int((one + every) / 2 / memory.USABLE_FRACTION)
        monkeypatch.setattr(memory, "available_memory", lambda device, free=free: free)
        with pytest.raises(NotEnoughMemoryError) as info:
            check_analysis_memory(model, size, **kind)
        offered = "fewer layers kept: 1 of the 2 layers fit (--layers last:1" in str(info.value)
        assert offered == ("gradients" in kind), str(info.value)


def test_a_module_level_budget_can_be_patched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loaded = _model_with(tmp_path, {})
    monkeypatch.setattr(memory, "available_memory", lambda device: 1000)
    with pytest.raises(NotEnoughMemoryError, match="1000 B is free"):
        check_analysis_memory(loaded.model, (32, 32))


def test_an_unknown_budget_refuses_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "available_memory", lambda device: None)
    from vitviz.blocks import VisionTransformer

    est = check_analysis_memory(VisionTransformer(CONFIG), (4096, 4096))
    assert est.needed > 2**40  # enormous, but nobody can say it won't fit


# Measures one analysis in a fresh process: the peak RSS it adds (high-water mark after - before).
_CHILD = r"""
import gc, json, resource, sys
import torch
from vitviz.pipeline.analysis import analyze
from vitviz.checkpoints.loaded import LoadedModel
from vitviz.pipeline.export import compute_maps
from vitviz.imaging import Preprocessing
from vitviz.kinds.vit.memory import estimate_analysis
from vitviz.blocks import VisionTransformer, ViTConfig
size = int(sys.argv[1])
cfg = ViTConfig(image_size=32, patch_size=8, dim=32, depth=2, heads=2, num_classes=3)
loaded = LoadedModel(VisionTransformer(cfg).eval(), ["a", "b", "c"], Preprocessing((32, 32)), "t")
prep = Preprocessing((size, size))
compute_maps(analyze(loaded, torch.zeros(3, 32, 32), preprocessing=prep, gradients=True))
gc.collect()


def high_water():
    # Peak RSS in bytes. Linux: VmHWM of this process's own memory (ru_maxrss keeps the
    # parent's high-water mark across fork and exec); elsewhere ru_maxrss (bytes on macOS).
    try:
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmHWM:"))
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
before = high_water()
compute_maps(analyze(loaded, torch.zeros(3, size, size), preprocessing=prep, gradients=True))
peak = high_water() - before
est = estimate_analysis(cfg, (size, size), gradients=True).needed
print(json.dumps({"peak": peak, "estimate": est}))
"""


def _measure(size: int) -> tuple[int, int]:
    """(peak bytes one analysis added in a fresh process, the estimate)."""
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(size)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    m = json.loads(proc.stdout.strip().splitlines()[-1])
    return m["peak"], m["estimate"]


def test_the_estimate_is_an_upper_bound_within_two_times_of_the_measured_peak() -> None:
    """384 px on the 2-layer, 2-head model: 2,305 tokens, about 0.45 GB at the peak (the CLI's
    analysis with gradients and its three maps). A busy machine can evict the process's library
    pages during the run, which only lowers the measured peak: the largest of up to three
    measurements is the closest to the truth."""
    peak, estimate = _measure(384)
    for _ in range(2):
        if estimate <= 2 * peak:
            break
        peak = max(peak, _measure(384)[0])
    assert peak <= estimate <= 2 * peak, f"estimate {estimate:,} B vs measured {peak:,} B"


def test_preprocessing_object_given_to_analyze_is_planned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loaded = _model_with(tmp_path, {})
    monkeypatch.setenv(BUDGET_ENV, "64M")
    prep = Preprocessing(image_size=(2048, 2048))
    with pytest.raises(NotEnoughMemoryError, match="input size 2048×2048"):
        analyze(loaded, photo(tmp_path), preprocessing=prep)


@pytest.mark.parametrize("gradients", [False, True])
def test_the_kept_block_outputs_count_in_what_an_analysis_keeps(
    tmp_path: Path, gradients: bool
) -> None:
    """Every analysis keeps each block's output tokens (L × N × D, for the feature views): the
    estimate counts them in ``kept``, as many bytes as the analysis holds."""
    from dataclasses import replace

    narrow = estimate_analysis(CONFIG, (64, 64), gradients=gradients)
    wide = estimate_analysis(replace(CONFIG, dim=64), (64, 64), gradients=gradients)
    L, N = CONFIG.depth, narrow.tokens
    assert narrow.block_outputs == 4 * L * N * CONFIG.dim
    assert wide.kept - narrow.kept == 4 * L * N * (64 - CONFIG.dim)  # nothing else grows with D
    assert narrow.kept >= narrow.attention + narrow.block_outputs
    loaded = _model_with(tmp_path, {})
    analysis = analyze(loaded, torch.zeros(3, 32, 32), gradients=gradients)
    held = sum(t.numel() * t.element_size() for t in analysis.block_outputs)
    est = estimate_for_model(loaded.model, (32, 32), gradients=gradients)
    assert held > 0 and est.block_outputs == held
