"""transformers' model for the library check (DESIGN §4): the folder's own class loaded by
transformers from its safetensors (local files only, no remote code, eager attention), read with
``output_attentions`` (at a size not the config's, with ``interpolate_pos_encoding`` where the
model takes it). The ViT's Hugging Face families use it as it is or with their own extra
inputs; a kind's family makes its own with ``transformers_reference`` (its logits from the
outputs, its layers' probabilities by its own hooks)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle

from vitviz.checkpoints.families.reference import LibraryReference

# (the model, the image) -> keywords its forward takes beside pixel_values
Inputs = Callable[[nn.Module, Tensor], dict[str, Any]]
# (the model, its outputs) -> logits (B, classes)
Logits = Callable[[nn.Module, Any], Tensor]
# (the model, the list its layers' probabilities go to) -> the hooks' handles
Hooks = Callable[[nn.Module, list[Tensor]], list[RemovableHandle]]


def build_transformers(
    arch: str, model_args: Mapping[str, Any], cfg: Any, weights: Path
) -> nn.Module:
    """transformers' own class ``arch`` of the folder (config.json's ``architectures``). It is
    built as the file has it: a base model saved without its pooler (as backbones and
    fine-tuning code save it) is built without one; any other part of the library's model that
    the file lacks would be a fresh random one: ValueError, no comparison (the note says the file
    was not checked, and why). ``model_args`` but ``model_type`` are config fields."""
    import transformers

    if weights.suffix != ".safetensors":
        raise ValueError("only safetensors folders are loaded by the library for the check")
    cls = getattr(transformers, arch, None) if arch else transformers.AutoModel
    if not (isinstance(cls, type) and issubclass(cls, transformers.PreTrainedModel)):
        cls = transformers.AutoModel
    overrides = {k: v for k, v in model_args.items() if k != "model_type"}
    model, missing = _from_folder(cls, weights.parent, overrides)
    no_pooler = {"add_pooling_layer": False}
    if missing and all(".pooler." in f".{k}" for k in missing) and _takes(cls, no_pooler):
        model, missing = _from_folder(cls, weights.parent, {**overrides, **no_pooler})
    if missing:
        raise ValueError(f"its model has parts the file lacks: {', '.join(missing[:3])}")
    return model.eval()


def _takes(cls: type, kwargs: dict[str, Any]) -> bool:
    """Whether ``cls``'s constructor takes every keyword of ``kwargs``."""
    return set(kwargs) <= set(inspect.signature(cls.__init__).parameters)


def _from_folder(cls: Any, folder: Path, kwargs: dict[str, Any]) -> tuple[nn.Module, list[str]]:
    """``cls.from_pretrained(folder)`` with its eager attention, and the names of its tensors
    the folder lacked; transformers' progress bar and load report (its missing-weight warnings)
    kept off the user's terminal."""
    from transformers.utils import logging as hf_logging

    bars, level = hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    try:
        model, info = cls.from_pretrained(
            folder,
            local_files_only=True,
            trust_remote_code=False,
            use_safetensors=True,
            attn_implementation="eager",
            output_loading_info=True,
            **kwargs,
        )
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()
    return model, sorted(info.get("missing_keys") or ())


def no_inputs(model: nn.Module, x: Tensor) -> dict[str, Any]:
    return {}


def no_hooks(model: nn.Module, out: list[Tensor]) -> list[RemovableHandle]:
    return []


def pooled_or_token(model: nn.Module, out: Any) -> Tensor:
    """The model's logits; a base model's pooler output, else its normed CLS token, or its
    mean token when it has no CLS token."""
    logits = getattr(out, "logits", None)
    if logits is not None:
        return logits
    pooled = getattr(out, "pooler_output", None)
    if pooled is not None:
        return pooled
    embeddings = getattr(getattr(model, "base_model", model), "embeddings", None)
    has_cls = getattr(embeddings, "cls_token", None) is not None
    hidden = out.last_hidden_state
    return hidden[:, 0] if has_cls else hidden.mean(1)


def at_size(model: nn.Module, x: Tensor) -> dict[str, Any]:
    """``interpolate_pos_encoding=True`` where ``x`` (B, C, H, W) is not the size of the model's
    config and its forward takes the keyword (ViT, DeiT, BEiT, ...: their position tables
    resampled by transformers' own rule; DINOv2 always resamples and has no keyword), else {}."""
    size = getattr(getattr(model, "config", None), "image_size", None)
    if isinstance(size, int):
        size = (size, size)
    if not isinstance(size, (list, tuple)) or tuple(x.shape[-2:]) == tuple(size):
        return {}
    takes = "interpolate_pos_encoding" in inspect.signature(model.forward).parameters
    return {"interpolate_pos_encoding": True} if takes else {}


def read_transformers(
    model: nn.Module,
    x: Tensor,
    inputs: Inputs = no_inputs,
    logits: Logits = pooled_or_token,
    hooks: Hooks = no_hooks,
) -> tuple[Tensor, list[Tensor] | None]:
    """transformers' logits and attention probabilities: those ``hooks`` gathered, else the
    outputs' ``attentions`` (nested tuples flattened in order); None when there are none."""
    per_layer: list[Tensor] = []
    handles = hooks(model, per_layer)
    try:
        with torch.no_grad():
            given = {**at_size(model, x), **inputs(model, x)}
            out = model(pixel_values=x, output_attentions=True, **given)
    finally:
        for h in handles:
            h.remove()
    attentions = []
    for a in getattr(out, "attentions", None) or []:
        attentions.extend(a if isinstance(a, (tuple, list)) else [a])
    return logits(model, out), (per_layer or attentions) or None


def transformers_reference(
    inputs: Inputs = no_inputs, logits: Logits = pooled_or_token, hooks: Hooks = no_hooks
) -> LibraryReference:
    """transformers' model read with ``inputs`` beside the pixels, ``logits`` from its outputs
    and its probabilities from ``hooks`` (else its ``attentions``)."""
    return LibraryReference(
        build_transformers,
        partial(read_transformers, inputs=inputs, logits=logits, hooks=hooks),
        any_size={},  # at_size tells the model when the probe is not its own size
    )


LIBRARY_MODEL = transformers_reference()  # any model read as transformers returns it
