"""Shared by the hostile-checkpoint tests: the tiny torchvision ViT (image 32,
patch 8, 2 layers, 2 heads) written as a checkpoint with its ``<checkpoint>.vitviz.json``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from safetensors.torch import save_file
from torch import Tensor, nn
from zoo_helpers import randomize_

State = dict[str, Tensor]


def tiny_tv_vit(seed: int = 0) -> nn.Module:
    """torchvision's VisionTransformer: 32 px, patch 8, 2 layers, 2 heads, width 32, 3 classes."""
    from torchvision.models.vision_transformer import VisionTransformer

    torch.manual_seed(seed)
    model = VisionTransformer(
        image_size=32,
        patch_size=8,
        num_layers=2,
        num_heads=2,
        hidden_dim=32,
        mlp_dim=64,
        num_classes=3,
    )
    return randomize_(model, seed)


def write_weights(path: Path, state: dict[Any, Tensor], metadata: dict | None = None) -> Path:
    """``state`` as .safetensors (by suffix) or torch.save."""
    if path.suffix == ".safetensors":
        save_file({k: v.contiguous() for k, v in state.items()}, str(path), metadata=metadata)
    else:
        torch.save(state, path)
    return path


def tv_checkpoint(
    folder: Path,
    name: str = "vit.pth",
    settings: dict[str, Any] | None = None,
    edit: Callable[[State], dict[Any, Tensor]] | None = None,
    seed: int = 0,
) -> Path:
    """The tiny torchvision ViT's state dict (changed by ``edit``) at ``folder/name``, with the
    sidecar {"heads": 2} updated by ``settings``."""
    state = dict(tiny_tv_vit(seed).state_dict())
    if edit is not None:
        state = edit(state)
    path = write_weights(folder / name, state)
    sidecar = {"heads": 2, **(settings or {})}
    (folder / f"{name}.vitviz.json").write_text(json.dumps(sidecar))
    return path


def photo(folder: Path, name: str = "photo.png", size: tuple[int, int] = (48, 40)) -> Path:
    """A random RGB image (W, H) written as PNG."""
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    path = folder / name
    Image.fromarray(pixels).save(path)
    return path
