"""What the Swin family converters share: reading the architecture off the weights, finishing the
SwinConfig with the user's settings, and building the model from a converted state dict."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from vitviz.checkpoints.assign import assign_exactly
from vitviz.checkpoints.errors import CheckpointError
from vitviz.checkpoints.families.base import Conversion, Source
from vitviz.checkpoints.families.common import Taker, finish_kind
from vitviz.kinds.swin.config import SwinConfig
from vitviz.kinds.swin.network import SwinTransformer

_EXTRAS = frozenset({"class_names", "preprocessing"})
# Our block parts and the suffix each has in our state dict.
BLOCK_PARTS = ("norm1", "attn.qkv", "attn.proj", "norm2", "mlp.fc1", "mlp.fc2")


def stage_blocks(state: Mapping[str, Tensor], pattern: str) -> dict[int, list[int]]:
    """Sorted block numbers by stage number, from keys matching ``pattern`` (a regex with the
    groups (stage), (block))."""
    rx = re.compile(pattern)
    found: dict[int, set[int]] = {}
    for key in state:
        m = rx.match(key)
        if m:
            found.setdefault(int(m.group(1)), set()).add(int(m.group(2)))
    return {s: sorted(found[s]) for s in sorted(found)}


def check_numbering(source: Source, found: dict[int, list[int]], stage_ids: list[int]) -> None:
    """Stages must be ``stage_ids`` and each stage's blocks 0..d-1."""
    ok = list(found) == stage_ids and all(js == list(range(len(js))) for js in found.values())
    if not found or not ok:
        raise CheckpointError(
            f"{source.name}: the Swin stages and blocks are not numbered 0..n-1 "
            f"(found stages {list(found)})."
        )


def window_of_table(table: Tensor, name: str, where: str) -> int:
    """The window side w of a ((2w − 1)², heads) relative position bias table."""
    side = math.isqrt(table.shape[0])
    if table.ndim != 2 or side * side != table.shape[0] or side % 2 == 0:
        raise CheckpointError(
            f"{where}: {name} {tuple(table.shape)} is not a ((2·window − 1)², heads) table."
        )
    return (side + 1) // 2


def take_block(
    t: Taker,
    old: str,
    new: str,
    names: Mapping[str, Sequence[str]],
    out: dict[str, Tensor],
) -> None:
    """Move one block's tensors into ``out`` under ``new`` + our names; ``names``: our part ->
    their names (first present wins), weight and bias each. The bias table is taken apart."""
    for part, theirs in names.items():
        for kind in ("weight", "bias"):
            tensor = t.maybe(*(f"{old}{n}.{kind}" for n in theirs))
            if tensor is None and not (part == "attn.qkv" and kind == "bias"):
                raise CheckpointError(
                    f"{t.source.name} looks like {t.looks_like}, but {old}{theirs[0]}.{kind} "
                    f"is missing."
                )
            if tensor is not None:
                out[f"{new}{part}.{kind}"] = tensor


def infer_stages(
    state: Mapping[str, Tensor],
    depths: Sequence[int],
    windows: Sequence[int] | None = None,
    where: str = "Swin",
) -> dict[str, Any]:
    """dims, heads, window sizes and MLP widths per stage, read off our-named tensors (v2, which
    has no bias table, needs the ``windows``; its heads come from the logit scale)."""
    dims, heads, found, hidden = [], [], [], []
    for s in range(len(depths)):
        b = f"stages.{s}.blocks.0."
        dims.append(state[b + "norm1.weight"].shape[0])
        hidden.append(state[b + "mlp.fc1.weight"].shape[0])
        table = state.get(b + "attn.relative_position_bias_table")
        if table is None:
            heads.append(state[b + "attn.logit_scale"].shape[0])
        else:
            heads.append(table.shape[1])
            found.append(window_of_table(table, b + "attn.relative_position_bias_table", where))
    out: dict[str, Any] = dict(
        dims=tuple(dims),
        depths=tuple(depths),
        heads=tuple(heads),
        mlp_hidden_dims=tuple(hidden),
        qkv_bias="stages.0.blocks.0.attn.qkv.bias" in state,
    )
    if found or windows is not None:
        out["window_sizes"] = tuple(found) if found else tuple(windows or ())
    cpb = state.get("stages.0.blocks.0.attn.cpb_mlp.0.weight")
    if cpb is not None:
        out.update(version=2, cpb_hidden=cpb.shape[0])
    return out


def per_stage(value: Any, stages: int, name: str, where: str) -> tuple[int, ...]:
    """One int per stage from an int or a list (config.json's window_size and the like)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,) * stages
    if isinstance(value, (list, tuple)) and len(value) == stages:
        return tuple(int(v) for v in value)
    raise CheckpointError(f"{where}: {name} {value!r} is not one number or one per stage.")


def refuse_leftovers(t: Taker) -> None:
    """Tensors no rule consumed: the Swin can't express them, so refuse rather than guess."""
    if t.state:
        keys = sorted(t.state)
        shown = ", ".join(keys[:4]) + (f" and {len(keys) - 4} more" if len(keys) > 4 else "")
        raise CheckpointError(
            f"{t.source.name} looks like {t.looks_like}, but it has parts vitviz's Swin can't "
            f"express: {shown}. Accepted Swins: torchvision swin_t/s/b and swin_v2_t/s/b, timm "
            f"swin_* and swinv2_*, Hugging Face Swin and Swinv2 folders."
        )


def finish_swin(
    source: Source,
    *,
    family: str,
    inferred: dict[str, Any],
    state: dict[str, Tensor],
    class_names: Sequence[str] | None,
    preprocessing: dict[str, Any],
    notes: list[str],
    imagenet_if_1000: bool = False,
) -> Conversion:
    """The user's settings over what the weights said -> SwinConfig, class names, preprocessing."""
    return finish_kind(
        source,
        kind="swin",  # the Swin kind's build_from_state makes its SwinTransformer
        config_cls=SwinConfig,
        words=("a Swin", "Swin config fields", "Swin"),
        extras=_EXTRAS,
        family=family,
        inferred=inferred,
        state=state,
        class_names=class_names,
        preprocessing=preprocessing,
        notes=notes,
        imagenet_if_1000=imagenet_if_1000,
    )


def build_swin(config: SwinConfig, state: Mapping[str, Tensor]) -> SwinTransformer:
    """A Swin in eval mode holding exactly ``state``; CheckpointError naming what does not fit."""
    with torch.device("meta"):
        model = SwinTransformer(config)
    return assign_exactly(model, state, "Swin model")
