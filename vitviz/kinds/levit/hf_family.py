"""Hugging Face transformers LeViT folders: ``LevitForImageClassification``,
``LevitForImageClassificationWithTeacher`` and ``LevitModel`` (config.json with ``model_type``
"levit" + model.safetensors, preprocessor_config.json).

Keys: ``[levit.]patch_embeddings.embedding_layer_{i}.{convolution, batch_norm}`` (the stem),
``[levit.]encoder.stages.{s}.layers.{j}``: an attention block's ``module.{attention_biases,
queries_keys_values, projection}``, an MLP's ``module.{linear_up, linear_down}``, and at the end
of stage s the subsample to stage s + 1 (``attention_biases``, ``keys_values``, ``queries``,
``projection``) with its MLP; ``classifier``, ``classifier_distill`` ({batch_norm, linear}).
Every tensor is renamed to timm's place (a stage's subsample is timm's ``downsample`` of the
next stage) and read as timm's LeViT is: transformers' LeViT computes the same, Hardswish
everywhere, its bias tables indexed by the same offsets (|dy|·w + |dx|, first seen first).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from torch import Tensor, nn

from vitviz.checkpoints.errors import CheckpointError
from vitviz.checkpoints.families.base import Conversion, Family, FamilyInfo, Source
from vitviz.checkpoints.families.common import IMAGENET_MEAN, IMAGENET_STD, Taker
from vitviz.checkpoints.families.hf_library import transformers_reference
from vitviz.checkpoints.labels import names_from_id2label
from vitviz.checkpoints.library_check import Reference
from vitviz.checkpoints.preprocessing import hf_preprocessing
from vitviz.kinds.levit.families import _shape, levit_conversion

LOOKS_LIKE = "a Hugging Face LeViT"
_STEM = "patch_embeddings.embedding_layer_1.convolution.weight"
_LAYER = re.compile(r"encoder\.stages\.(\d+)\.layers\.(\d+)\.")
_BN = ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")


def hf_layers(model: nn.Module) -> list[nn.Module]:
    """transformers' LeViT's attention modules in vitviz's order (a stage's subsample, at the
    end of its stage there, first of the next here)."""
    base = getattr(model, "levit", model)
    out = []
    for stage in base.encoder.stages:
        for layer in stage.layers:
            module = getattr(layer, "module", layer)
            if hasattr(module, "attention_biases"):
                out.append(module)
    return out


def hf_probabilities(model: nn.Module, out: list[Tensor]) -> list[Any]:
    """Hooks appending each attention module's softmax(q·kᵀ·scale + bias) (B, heads, N_q, N_k),
    computed from its own q, k and bias table as its forward does."""

    def hook(m: nn.Module, args: tuple[Any, ...], _output: Tensor) -> None:
        x = args[0]
        B, N, _ = x.shape
        h, kd = m.num_attention_heads, m.key_dim
        if hasattr(m, "keys_values"):
            k, _v = m.keys_values(x).view(B, N, h, -1).split([kd, m.attention_ratio * kd], dim=3)
            q = m.queries(m.queries_subsample(x)).view(B, -1, h, kd)
        else:
            q, k, _v = (
                m.queries_keys_values(x)
                .view(B, N, h, -1)
                .split([kd, kd, m.attention_ratio * kd], dim=3)
            )
        q, k = q.permute(0, 2, 1, 3), k.permute(0, 2, 1, 3)
        attn = q @ k.transpose(-2, -1) * m.scale + m.get_attention_biases(x.device)
        out.append(attn.softmax(dim=-1))

    return [m.register_forward_hook(hook) for m in hf_layers(model)]


LIBRARY_MODEL = transformers_reference(hooks=hf_probabilities)


def _base(state: dict[str, Tensor]) -> str | None:
    key = next((k for k in state if k.endswith(_STEM)), None)
    return None if key is None else key[: -len(_STEM)]


def detect(source: Source) -> bool:
    cfg = source.hf_config
    if cfg is not None and cfg.get("model_type") != "levit":
        return False
    base = _base(source.state)
    return base is not None and any(k.startswith(f"{base}encoder.stages.") for k in source.state)


def _move(t: Taker, old: str, new: str, out: dict[str, Tensor], bn: bool = True) -> None:
    """``old``'s Linear (or conv) and BatchNorm tensors to ``new``'s (timm's names)."""
    out[f"{new}.linear.weight"] = t.take(f"{old}.linear.weight", f"{old}.convolution.weight")
    if bn:
        for part in _BN:
            tensor = t.maybe(f"{old}.batch_norm.{part}")
            if tensor is not None or part != "num_batches_tracked":
                out[f"{new}.bn.{part}"] = (
                    t.take(f"{old}.batch_norm.{part}") if tensor is None else tensor
                )


def _renamed(source: Source, t: Taker, base: str) -> dict[str, Tensor]:
    """The state under timm's names; CheckpointError for a layer of no known kind or an MLP
    with no attention before it."""
    out: dict[str, Tensor] = {}
    i = 1
    while f"{base}patch_embeddings.embedding_layer_{i}.convolution.weight" in t:
        old = f"{base}patch_embeddings.embedding_layer_{i}"
        out[f"stem.conv{i}.linear.weight"] = t.take(f"{old}.convolution.weight")
        for part in _BN:
            tensor = t.maybe(f"{old}.batch_norm.{part}")
            if tensor is not None:
                out[f"stem.conv{i}.bn.{part}"] = tensor
        i += 1
    layers: dict[int, set[int]] = {}
    for key in t.state:
        m = _LAYER.match(key[len(base) :]) if key.startswith(base) else None
        if m:
            layers.setdefault(int(m.group(1)), set()).add(int(m.group(2)))
    blocks: dict[int, int] = {}
    for s in sorted(layers):
        last: str | None = None  # timm's name of the attention an MLP after it belongs to
        for j in sorted(layers[s]):
            old = f"{base}encoder.stages.{s}.layers.{j}"
            if f"{old}.module.queries_keys_values.linear.weight" in t:
                b = blocks.get(s, 0)
                blocks[s] = b + 1
                last = f"stages.{s}.blocks.{b}"
                out[f"{last}.attn.attention_biases"] = t.take(f"{old}.module.attention_biases")
                _move(t, f"{old}.module.queries_keys_values", f"{last}.attn.qkv", out)
                _move(t, f"{old}.module.projection", f"{last}.attn.proj.ln", out)
            elif f"{old}.keys_values.linear.weight" in t:
                last = f"stages.{s + 1}.downsample"
                down = f"{last}.attn_downsample"
                out[f"{down}.attention_biases"] = t.take(f"{old}.attention_biases")
                _move(t, f"{old}.keys_values", f"{down}.kv", out)
                _move(t, f"{old}.queries", f"{down}.q.ln", out)
                _move(t, f"{old}.projection", f"{down}.proj.ln", out)
            elif f"{old}.module.linear_up.linear.weight" in t and last is not None:
                _move(t, f"{old}.module.linear_up", f"{last}.mlp.ln1", out)
                _move(t, f"{old}.module.linear_down", f"{last}.mlp.ln2", out)
                last = None
            else:
                raise CheckpointError(
                    f"{source.name} looks like {LOOKS_LIKE}, but its layer {s}.{j} is no "
                    "attention, subsample or MLP after one that vitviz's LeViT has."
                )
    for theirs, ours in (("classifier", "head"), ("classifier_distill", "head_dist")):
        if f"{theirs}.linear.weight" in t:
            out[f"{ours}.linear.weight"] = t.take(f"{theirs}.linear.weight")
            out[f"{ours}.linear.bias"] = t.take(f"{theirs}.linear.bias")
            for part in _BN:
                tensor = t.maybe(f"{theirs}.batch_norm.{part}")
                if tensor is not None:
                    out[f"{ours}.bn.{part}"] = tensor
    t.refuse_leftovers()
    return out


def convert(source: Source) -> Conversion:
    cfg: dict[str, Any] = dict(source.hf_config or {})
    if not cfg:
        raise CheckpointError(
            f"{source.name} looks like {LOOKS_LIKE}, but its config.json is not beside it; open "
            "the folder transformers saved."
        )
    t = Taker(source, LOOKS_LIKE)
    state = _renamed(source, t, _base(t.state) or "")
    renamed = dataclasses.replace(source, state=state, folder_config=None)
    shape = _shape(renamed)
    notes: list[str] = []
    proc = source.preprocessor
    size = tuple(g * shape["stem_stride"] for g in shape["grid"])
    if proc is None:
        proc = {
            "do_resize": True,
            "size": {"height": size[0], "width": size[1]},
            "resample": 3,
            "image_mean": IMAGENET_MEAN,
            "image_std": IMAGENET_STD,
        }
        notes.append(f"{source.preprocessor_found}: ImageNet mean and std at the model's size")
    prep, prep_notes = hf_preprocessing(proc, size)
    prep.pop("image_size", None)
    conversion = levit_conversion(
        renamed, shape, {"activation": "hard_swish"}, "huggingface-levit",
        names_from_id2label(cfg.get("id2label"), shape["num_classes"]), prep, notes + prep_notes,
    )  # fmt: skip
    arch = (cfg.get("architectures") or [""])[0]
    conversion.reference = Reference(
        "transformers", str(arch), {"model_type": "levit"}, how=LIBRARY_MODEL
    )
    return conversion


FAMILY = Family(
    "huggingface-levit",
    detect,
    convert,
    info=FamilyInfo(
        label="Hugging Face transformers LeViT",
        names="LevitForImageClassification, LevitForImageClassificationWithTeacher, LevitModel",
        forms="save_pretrained folder",
        parts=(
            "conv stem with BatchNorm and Hardswish",
            "attention with learned per-offset biases, Linear + BatchNorm layers",
            "subsample attention between stages (queries on a stride-2 grid)",
            "MLP residual blocks",
            "head on the mean token through a BatchNorm (with teacher: the mean of two heads)",
        ),
    ),
)
