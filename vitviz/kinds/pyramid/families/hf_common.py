"""What the transformers pyramid families (PVT v1, PVT v2, Hiera) read the same way: the
folder's base prefix and config.json, the stages' and blocks' numbers, tensors renamed by a
table, the classifier, per-stage settings, and the Conversion with its library check."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor

from vitviz.checkpoints.errors import CheckpointError
from vitviz.checkpoints.families.base import Conversion, Source
from vitviz.checkpoints.families.common import Taker
from vitviz.checkpoints.labels import names_from_id2label
from vitviz.checkpoints.library_check import Reference
from vitviz.kinds.pyramid.config import PyramidConfig
from vitviz.kinds.pyramid.families.common import finish_pyramid, hf_pyramid_preprocessing


def base_of(state: Mapping[str, Any], suffix: str) -> str | None:
    """The prefix (``pvt_v2.``, ``hiera.``, "") of the first key ending in ``suffix``; None
    when none does."""
    key = next((k for k in state if k.endswith(suffix)), None)
    return None if key is None else key[: -len(suffix)]


def hf_config_of(source: Source, looks_like: str, what: str) -> dict[str, Any]:
    """The folder's config.json; refused when it is not beside the weights (``what``: what
    it says that the weights don't, e.g. "head counts, eps, strides")."""
    cfg: dict[str, Any] = dict(source.hf_config or {})
    if not cfg:
        raise CheckpointError(
            f"{source.name} looks like {looks_like}, but its config.json ({what}) is not "
            "beside it; open the folder transformers saved."
        )
    return cfg


def stage_blocks(
    state: Mapping[str, Any], pattern: str, where: str, what: str
) -> dict[int, list[int]]:
    """{stage: [block numbers]} of the keys matching ``pattern`` (a regex whose two groups are
    the stage and the block), each numbered 0..n-1, else CheckpointError (``what``: e.g. "PVT
    v2 stages and blocks")."""
    rx = re.compile(pattern)
    found: dict[int, set[int]] = {}
    for key in state:
        m = rx.match(key)
        if m:
            found.setdefault(int(m.group(1)), set()).add(int(m.group(2)))
    stages = sorted(found)
    if stages != list(range(len(stages))) or any(
        sorted(found[s]) != list(range(len(found[s]))) for s in stages
    ):
        raise CheckpointError(f"{where}: the {what} are not numbered 0..n-1.")
    return {s: sorted(found[s]) for s in stages}


def take_renamed(
    t: Taker, old: str, new: str, names: Mapping[str, str], out: dict[str, Tensor]
) -> None:
    """Each present ``{old}{theirs}.{weight, bias}`` into ``out`` as ``{new}{ours}.…`` for
    ``names`` = {ours: theirs}; what is missing is left to the model's exact load."""
    for ours, theirs in names.items():
        for kind in ("weight", "bias"):
            tensor = t.maybe(f"{old}{theirs}.{kind}")
            if tensor is not None:
                out[f"{new}{ours}.{kind}"] = tensor


def take_kv(t: Taker, key: str, value: str, new: str, out: dict[str, Tensor]) -> None:
    """transformers' separate ``key`` and ``value`` Linears fused into timm's one ``new``
    (2·D, D) weight and (2·D,) bias."""
    for kind in ("weight", "bias"):
        k, v = t.maybe(f"{key}.{kind}"), t.maybe(f"{value}.{kind}")
        if k is not None and v is not None:
            out[f"{new}.{kind}"] = torch.cat([k, v])


def take_classifier(t: Taker, new: str, out: dict[str, Tensor]) -> int:
    """transformers' ``classifier`` into ``out`` as ``new``; its classes (0 without one)."""
    if "classifier.weight" not in t:
        return 0
    out[f"{new}.weight"] = t.take("classifier.weight")
    out[f"{new}.bias"] = t.take("classifier.bias")
    return int(out[f"{new}.weight"].shape[0])


def per_stage(cfg: Mapping[str, Any], key: str, stages: int, where: str) -> list[Any]:
    """config.json's ``key``: one value for each of the first ``stages`` stages."""
    value = cfg.get(key)
    if isinstance(value, (list, tuple)) and len(value) >= stages:
        return list(value[:stages])
    raise CheckpointError(f"{where}: config.json's {key} {value!r} is not one value per stage.")


def same_after_first(values: list[int], name: str, where: str, one: str) -> None:
    """The stages after the first must share ``values`` (``one``: what vitviz has one of,
    e.g. "PVT v2 has one downsampling")."""
    if len(set(values[1:])) > 1:
        raise CheckpointError(
            f"{where}: {name} {values} differ between later stages; vitviz's {one} for every "
            "stage after the first."
        )


def refuse_activation(cfg: Mapping[str, Any], where: str, model: str) -> None:
    """Only GELU, as every ``model`` (e.g. "PVT v2")."""
    act = cfg.get("hidden_act", "gelu")
    if act != "gelu":
        raise CheckpointError(f"{where}: hidden_act {act!r} is not supported ({model} uses gelu).")


def hf_image_size(cfg: Mapping[str, Any], default: Any) -> tuple[int, int]:
    """config.json's ``image_size`` (one int or (H, W); ``default`` when absent) as (H, W)."""
    size = cfg.get("image_size", default)
    return (size, size) if isinstance(size, int) else (int(size[0]), int(size[1]))


def hf_pyramid_conversion(
    source: Source,
    cfg: Mapping[str, Any],
    *,
    family: str,
    model_type: str,
    image: tuple[int, int],
    resample: int,
    inferred: dict[str, Any],
    state: dict[str, Tensor],
    num_classes: int,
    notes: list[str],
    how: Callable[..., Any],
    config_cls: type = PyramidConfig,
) -> Conversion:
    """The Conversion (``finish_pyramid``) with the image processor's preprocessing (PIL
    ``resample`` where it says none) and the check against transformers' own model of the
    folder's first architecture, read ``how``."""
    prep, prep_notes = hf_pyramid_preprocessing(source, image, resample, notes)
    conversion = finish_pyramid(
        source,
        family=family,
        inferred=inferred,
        state=state,
        class_names=names_from_id2label(cfg.get("id2label"), num_classes),
        preprocessing=prep,
        notes=notes + prep_notes,
        config_cls=config_cls,
    )
    arch = (cfg.get("architectures") or [""])[0]
    conversion.reference = Reference("transformers", str(arch), {"model_type": model_type}, how=how)
    return conversion
