"""What the Hugging Face CLIP and SigLIP families share: the image tower's encoder layers under
vitviz's names, a tower saved by transformers 5 without its ``vision_model.`` prefix, the folder
its tokenizer files sit in, the activation names, and the conversion's preprocessing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from vitviz.checkpoints.errors import CheckpointError
from vitviz.checkpoints.families.base import Conversion, Source
from vitviz.checkpoints.preprocessing import hf_preprocessing
from vitviz.imaging import Preprocessing
from vitviz.kinds.clip.network import ClipConfig
from vitviz.kinds.clip.text import HF_ACTIVATIONS

VISION = "vision_model."
# an encoder layer's tensors (besides q/k/v, fused into qkv): theirs -> vitviz's
ENCODER_ROLES = {
    "layer_norm1": "norm1",
    "self_attn.out_proj": "attn.proj",
    "layer_norm2": "norm2",
    "mlp.fc1": "mlp.fc1",
    "mlp.fc2": "mlp.fc2",
}


def encoder_depth(state: dict[str, Tensor]) -> int:
    """Layers of the image tower's encoder (``vision_model.encoder.layers.N``)."""
    prefix = VISION + "encoder.layers."
    return 1 + max(int(k[len(prefix) :].split(".")[0]) for k in state if k.startswith(prefix))


def take_encoder(state: dict[str, Tensor], depth: int, out: dict[str, Tensor]) -> None:
    """Move the encoder's layers from ``state`` into ``out`` under vitviz's block names."""
    for i in range(depth):
        b = f"{VISION}encoder.layers.{i}."
        for part in ("weight", "bias"):
            qkv = [state.pop(f"{b}self_attn.{n}_proj.{part}") for n in "qkv"]
            out[f"blocks.{i}.attn.qkv.{part}"] = torch.cat(qkv)
            for theirs, ours in ENCODER_ROLES.items():
                out[f"blocks.{i}.{ours}.{part}"] = state.pop(f"{b}{theirs}.{part}")


def lacks_prefix(source: Source, model_type: str, key: str) -> bool:
    """An image tower alone (``model_type``) saved by transformers 5: its keys, ``key`` among
    them, lack ``vision_model.``."""
    cfg = source.hf_config or {}
    return cfg.get("model_type") == model_type and key in source.state


def restore_prefix(state: dict[str, Tensor]) -> None:
    """Every key under ``vision_model.`` again, in place (no second reference to a tensor)."""
    for key in list(state):
        state[VISION + key] = state.pop(key)


def activation(name: str, tower: str) -> str:
    """vitviz's name of a Hugging Face activation; CheckpointError for one it doesn't compute."""
    if name not in HF_ACTIVATIONS:
        raise CheckpointError(f"the {tower}'s activation {name!r} is not one vitviz computes")
    return HF_ACTIVATIONS[name]


def folder_of(source: Source) -> Path | None:
    """The folder the weights (and the tokenizer files) are in."""
    if source.path is None:
        return None
    return source.path if source.path.is_dir() else source.path.parent


def tower_conversion(
    source: Source,
    family: str,
    config: ClipConfig,
    state: dict[str, Tensor],
    processor: dict[str, Any],
    notes: list[str],
) -> Conversion:
    """The conversion of a CLIP-kind model, its preprocessing from ``processor`` (the folder's
    image processor, or the caller's defaults): no classes until prompts are typed."""
    prep, prep_notes = hf_preprocessing(processor, config.vit.image_size)
    return Conversion(
        family=family,
        config=config,
        state=state,
        class_names=[],
        preprocessing=Preprocessing.from_dict({"channels": config.vit.in_channels, **prep}),
        notes=notes + prep_notes,
        kind="clip",
    )
