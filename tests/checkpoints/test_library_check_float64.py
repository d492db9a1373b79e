"""The library check retries a float32 miss in float64 (DESIGN §4): a model that is the same
function opens, with both numbers in its note; a wrong one is refused both ways; a retry that
would not fit in the memory free refuses with the float32 numbers.

The model that misses only by rounding is built honestly: timm's SwinV2-CR (vitviz computes its
cosine attention in another order, so their float32 logits differ by about 1e-6) with its head's
bias set to cancel the head's product on the check's own probe image, leaving logits 1e-4 of
that product's size: float32's rounding of the product (the same in both models' head, not in
what enters it) is then about 1e-2 of the logits, while float64's is about 1e-12.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from swin_helpers import tiny_timm_swin_cr
from timm.models import save_for_hf

from vitviz.checkpoints import CheckpointError, load_checkpoint
from vitviz.checkpoints.library_check import (
    FLOAT64_RTOL,
    LOGITS_RTOL,
    check_or_refuse,
    checked,
)

LEFT = 1e-4  # the logits left after the cancellation, over the head's product


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VITVIZ_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("VITVIZ_NO_LIBRARY_CHECK", raising=False)
    monkeypatch.delenv("VITVIZ_MEMORY_BUDGET", raising=False)


def _cancelling_swin(folder: Path, cancel: bool = True) -> Path:
    """A tiny SwinV2-CR (64 px, perturbed) saved as timm saves it; ``cancel``: its head bias
    is minus the head's product on the probe image (seed 0, as the check makes it), computed in
    float64, plus LEFT of its size spread over the classes."""
    model = tiny_timm_swin_cr(64, seed=0)
    if cancel:
        x = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            model.double()
            features = model.forward_head(model.forward_features(x.double()), pre_logits=True)
            product = model.head.fc.weight @ features[0]
            spread = torch.linspace(-1, 1, product.numel(), dtype=torch.float64)
            model.head.fc.bias.copy_(-product + LEFT * product.abs().max() * spread)
            model.float()
    save_for_hf(model, folder, safe_serialization=True)
    return folder


def _checked_note(notes: list[str]) -> str:
    return next(n for n in notes if n.startswith("checked against timm"))


def test_a_model_that_misses_only_by_float32_rounding_opens_checked_in_float64(
    tmp_path: Path,
) -> None:
    folder = _cancelling_swin(tmp_path / "cr")
    loaded = load_checkpoint(folder)
    result = checked(loaded.model, folder, loaded.reference, kind=loaded.kind)  # the cached one
    assert result is not None and result.ok
    assert result.logits is not None and result.logits > LOGITS_RTOL  # a float32 miss: retried
    assert result.float64_logits is not None and result.float64_logits <= FLOAT64_RTOL
    note = _checked_note(loaded.notes)
    assert "in float32 logits" in note and "checked in float64: logits" in note, note
    assert f"{result.logits:.1g}" in note and f"{result.float64_logits:.1g}" in note, note
    assert "\n" not in note
    again = load_checkpoint(folder)  # from the cache: the same words
    assert _checked_note(again.notes) == note


def test_a_model_within_float32s_limits_is_not_retried(tmp_path: Path) -> None:
    folder = _cancelling_swin(tmp_path / "cr", cancel=False)
    loaded = load_checkpoint(folder)
    result = checked(loaded.model, folder, loaded.reference, kind=loaded.kind)
    assert result is not None and result.ok and result.logits is not None
    assert result.logits <= LOGITS_RTOL and result.float64_logits is None
    assert "float64" not in _checked_note(loaded.notes)


def _unchecked(folder: Path, monkeypatch: pytest.MonkeyPatch):
    """The folder opened without the check (so none is cached), the check switched back on."""
    monkeypatch.setenv("VITVIZ_NO_LIBRARY_CHECK", "1")
    loaded = load_checkpoint(folder)
    monkeypatch.delenv("VITVIZ_NO_LIBRARY_CHECK")
    return loaded


@pytest.mark.parametrize(("cancel", "factor"), [(False, 1.01), (True, 1 + 1e-5)])
def test_a_wrong_network_is_refused_in_float32_and_in_float64(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cancel: bool, factor: float
) -> None:
    """vitviz's network broken on purpose (a weight matrix scaled by ``factor``): a plain model
    misses in float32 and in float64; on the cancelling one a mistake of 1e-5 hides in float32's
    miss, and float64 shows it."""
    folder = _cancelling_swin(tmp_path / "cr", cancel=cancel)
    loaded = _unchecked(folder, monkeypatch)
    weight = next(p for n, p in loaded.model.named_parameters() if p.ndim == 2 and "attn" in n)
    with torch.no_grad():
        weight.mul_(factor)
    with pytest.raises(CheckpointError) as info:
        check_or_refuse(loaded.model, folder, loaded.reference, [], loaded.kind)
    text = str(info.value)
    assert "differs from timm" in text and "\n" not in text, text
    assert "in float64 too: logits" in text and f"(limit {FLOAT64_RTOL:g})" in text, text
    assert loaded.model.head.weight.dtype == torch.float32  # vitviz's own model is not cast


def test_a_retry_that_would_not_fit_in_memory_refuses_with_the_float32_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VITVIZ_MEMORY_BUDGET", "1K")
    assert any(  # within float32's limits: no retry, no memory asked
        n.startswith("checked against timm")
        for n in load_checkpoint(_cancelling_swin(tmp_path / "plain", cancel=False)).notes
    )
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(_cancelling_swin(tmp_path / "cr"))
    text = str(info.value)
    assert "logits" in text and f"(limit {LOGITS_RTOL:g})" in text and "\n" not in text, text
    assert "not retried in float64: it would need" in text and "MB is usable" in text, text
