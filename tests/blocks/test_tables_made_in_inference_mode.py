"""Tables a model makes once and keeps (a relative position bias's index, the rotary sin/cos)
are made as ordinary tensors even when the first forward pass that asks for them runs under
``torch.inference_mode()``: a later analysis with gradients saves them for its backward pass,
which an inference tensor can't be (the GPU path hit it: a bare forward on the moved model, then
relevance)."""

from __future__ import annotations

import pytest
import torch

from vitviz.blocks import ViTConfig
from vitviz.blocks.vit import VisionTransformer
from vitviz.checkpoints.loaded import LoadedModel
from vitviz.checkpoints.native import default_preprocessing
from vitviz.pipeline.analysis import analyze

SMALL = dict(image_size=(32, 32), patch_size=8, num_classes=3, dim=32, depth=2, heads=4)
CASES = {
    "relative position table": dict(rel_pos_bias=True),
    "rotary": dict(rope="axial"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_relevance_after_a_first_forward_in_inference_mode(case: str) -> None:
    torch.manual_seed(0)
    config = ViTConfig(**SMALL, **CASES[case])
    model = VisionTransformer(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))  # a non-zero table and head
    x = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():  # the first pass: the tables are made here
        fused = model(x)
    loaded = LoadedModel(model=model, class_names=["a", "b", "c"],
                         preprocessing=default_preprocessing(config), family="vitviz")  # fmt: skip
    analysis = analyze(loaded, x[0], gradients=True)
    relevance = analysis.relevance()
    assert torch.isfinite(relevance).all() and relevance.abs().sum() > 0
    torch.testing.assert_close(analysis.logits.reshape(fused.shape), fused, atol=1e-5, rtol=1e-5)
