"""Building a pyramid ViT from a converted state dict, and finishing its config with the user's
settings."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from vitviz.checkpoints.assign import assign_exactly
from vitviz.checkpoints.families.base import Conversion, Source
from vitviz.checkpoints.families.common import finish_kind
from vitviz.kinds.pyramid.config import PyramidConfig
from vitviz.kinds.pyramid.hiera_config import HieraConfig
from vitviz.kinds.pyramid.hiera_network import HieraViT
from vitviz.kinds.pyramid.network import PyramidViT

EXTRAS = frozenset({"class_names", "preprocessing", "arch"})


def finish_pyramid(
    source: Source,
    *,
    family: str,
    inferred: dict[str, Any],
    state: dict[str, Tensor],
    class_names: Sequence[str] | None,
    preprocessing: dict[str, Any],
    notes: list[str],
    config_cls: type = PyramidConfig,
) -> Conversion:
    """The user's settings over what the weights said -> ``config_cls`` (PyramidConfig,
    HieraConfig), names, preprocessing."""
    return finish_kind(
        source,
        kind="pyramid",
        config_cls=config_cls,
        words=("a pyramid ViT", "its config fields", family),
        extras=EXTRAS,
        family=family,
        inferred=inferred,
        state=state,
        class_names=class_names,
        preprocessing=preprocessing,
        notes=notes,
        imagenet_if_1000=True,
    )


def build_pyramid(
    config: PyramidConfig | HieraConfig, state: Mapping[str, Tensor]
) -> PyramidViT | HieraViT:
    """A pyramid ViT (PVT v2 or Hiera, by its config) in eval mode holding exactly ``state``;
    CheckpointError naming the misfits."""
    hiera = isinstance(config, HieraConfig)
    with torch.device("meta"):
        model = HieraViT(config) if hiera else PyramidViT(config)
    return assign_exactly(model, state, "Hiera model" if hiera else "PVT v2 model")
