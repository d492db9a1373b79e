"""The randomly initialised vitviz ViTs the benchmarks measure, opened as the window holds a
model (a ``LoadedModel``: classes named ``class i``, the variant's default preprocessing)."""

from __future__ import annotations

import _common  # noqa: F401  (puts the working tree's vitviz first on sys.path)
import torch

from vitviz.blocks import create_model
from vitviz.checkpoints.loaded import LoadedModel
from vitviz.checkpoints.native import default_preprocessing


def random_vit(variant: str, seed: int = 0, **overrides: object) -> LoadedModel:
    """``variant`` (``vitviz.blocks`` names) with weights drawn after ``torch.manual_seed(seed)``,
    in eval mode on the CPU; ``overrides``: config fields (image_size, patch_size, dim, …)."""
    torch.manual_seed(seed)
    model = create_model(variant, **overrides).eval()
    names = [f"class {i}" for i in range(model.config.num_classes)]
    return LoadedModel(
        model=model,
        class_names=names,
        preprocessing=default_preprocessing(model.config),
        family="vitviz",
    )
