"""A Swin's kept tables (the window slots, the shift mask, the relative position index) are
made as ordinary tensors even when the first pass that asks for them runs under
``torch.inference_mode()``: a later analysis with gradients saves them for its backward pass."""

from __future__ import annotations

import torch

from vitviz.kinds.swin import windows
from vitviz.kinds.swin.analysis import analyze_swin
from vitviz.kinds.swin.config import SwinConfig
from vitviz.kinds.swin.network import SwinTransformer


def test_gradient_rollout_after_a_first_forward_in_inference_mode() -> None:
    for cached in (windows._slots, windows._slots_on, windows._shift_mask):
        cached.cache_clear()  # made afresh below, inside inference mode
    torch.manual_seed(0)
    config = SwinConfig(
        image_size=(32, 32), num_classes=3, dims=(16, 32), depths=(2, 2), heads=(2, 4),
        window_sizes=(4, 4),
    )  # fmt: skip
    model = SwinTransformer(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))  # a non-zero bias table and head
    x = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():  # the first pass: every table is made here
        fused = model(x)
    analysis = analyze_swin(model, x[0], gradients=True)
    rollout = analysis.gradient_rollout()
    assert torch.isfinite(rollout).all() and rollout.abs().sum() > 0
    torch.testing.assert_close(analysis.logits.reshape(fused.shape), fused, atol=1e-5, rtol=1e-5)
