"""The shape of a timm folder's config.json, checked before any family reads it.

timm writes ``architecture`` (a model name), ``pretrained_cfg`` and (where given)
``model_args`` (objects), ``num_classes``. A file that says otherwise, or whose ``model_args``
give sizes no model has (a depth of a million blocks, a width that would allocate tens of GB,
zero heads or input channels), is refused in one line naming the field: the families then read
well-formed values, and timm is never asked to build what would hang or exhaust memory.
"""

from __future__ import annotations

import math
from typing import Any

from vitviz.checkpoints.errors import CheckpointError

MAX_MODEL_SIDE = 4096  # input pixels per side: beyond every released model (DESIGN §8)
# model_args keys that hold sizes (a number, or one a stage): each a whole number in range
_DEPTHS = frozenset({"depth", "depths", "layers", "num_full_attn_blocks", "local_up_to_layer"})
_WIDTHS = frozenset(
    {
        "embed_dim", "embed_dims", "inner_dim", "key_dim", "base_dims", "stem_hidden_dim",
        "num_heads", "heads", "num_heads_outer", "num_heads_inner", "num_kv_heads",
        "in_chans", "patch_size",
    }
)  # fmt: skip
_MAX_DEPTH = 1000  # blocks per stage: beyond any real model, short of a hang
_MAX_WIDTH = 1 << 16  # channels or heads


def check_timm_config(cfg: dict[str, Any], name: str) -> None:
    """Refuse a timm config.json (``name``: its folder's, for the message) whose fields are of
    the wrong type or out of range."""
    where = f"{name}/config.json"
    arch = cfg.get("architecture")
    if not isinstance(arch, str) or not arch:
        raise CheckpointError(f"{where}: its architecture is {_shown(arch)}, not a timm name.")
    for key in ("pretrained_cfg", "model_args"):
        value = cfg.get(key)
        if value is not None and not isinstance(value, dict):
            raise CheckpointError(f"{where}: its {key} is {_shown(value)}, not a JSON object.")
    size = (cfg.get("pretrained_cfg") or {}).get("input_size")
    if size is not None and not (
        isinstance(size, list) and len(size) == 3 and all(_whole(v, 1, None) for v in size)
    ):
        raise CheckpointError(
            f"{where}: its pretrained_cfg input_size is {_shown(size)}, not [channels, height, "
            "width] in whole numbers."
        )
    for key, value in (cfg.get("model_args") or {}).items():
        problem = model_arg_problem(key, value)
        if problem is not None:
            raise CheckpointError(f"{where}: its model_args {key} {_shown(value)} {problem}.")


def model_arg_problem(key: str, value: Any) -> str | None:
    """Why a size in ``model_args`` can't be a model's (a phrase), or None (other keys: None)."""
    if key in ("img_size", "image_size"):
        most, what = MAX_MODEL_SIDE, "pixels a side"
    elif key in _DEPTHS:
        most, what = _MAX_DEPTH, "blocks"
    elif key in _WIDTHS:
        most, what = _MAX_WIDTH, ""
    else:
        return None
    least = 0 if key in _DEPTHS else 1  # a stage of no blocks (CrossViT's fusion: [1, 2, 0])
    items = _flat(value)
    if not items or not all(_whole(v, least, most) for v in items):
        return f"is not a whole number from {least} to {most} {what}".rstrip()
    return None


def _flat(value: Any) -> list[Any] | None:
    """A number or a (nested) list of numbers as one list; None for anything else."""
    if isinstance(value, (list, tuple)):
        out: list[Any] = []
        for v in value:
            inner = _flat(v)
            if inner is None:
                return None
            out += inner
        return out
    return [value]


def _whole(value: Any, least: int, most: int | None) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        return False
    return value >= least and (most is None or value <= most)


def _shown(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
