"""One Protocol (vitviz.blocks.protocol) describes what a model must offer: vitviz's ViT and a
user's module run through vitviz.modelcode both satisfy it, and a module without the explained
forward pass does not."""

from __future__ import annotations

import torch
from torch import nn

from vitviz.blocks import create_model
from vitviz.blocks.protocol import ExplainableModel, ModelConfig
from vitviz.modelcode.adapter import CapturedModel, ModelCodeConfig


def test_vitviz_vit_satisfies_the_protocol() -> None:
    model = create_model("vit-tiny", num_classes=3, image_size=32, patch_size=8, depth=2)
    assert isinstance(model, ExplainableModel)
    assert isinstance(model.config, ModelConfig)
    out = model.forward_explained(torch.zeros(1, 3, 32, 32))
    assert len(out.attentions) == model.config.depth
    assert out.attentions[0].shape[-1] == model.num_prefix_tokens + 16


def test_captured_model_satisfies_the_protocol() -> None:
    config = ModelCodeConfig((32, 32), 8, 3, 2, 2, 16, 1)
    model = CapturedModel(nn.Linear(4, 3), config)
    assert isinstance(model, ExplainableModel)
    assert isinstance(model.config, ModelConfig)
    assert model.num_prefix_tokens == 1


def test_a_plain_module_does_not() -> None:
    assert not isinstance(nn.Linear(4, 3), ExplainableModel)
