"""Building a pyramid ViT from a converted state dict, and finishing its config with the user's
settings."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from vitviz.checkpoints.assign import assign_exactly
from vitviz.checkpoints.errors import CheckpointError
from vitviz.checkpoints.families.base import Conversion, Source
from vitviz.checkpoints.families.common import check_channels
from vitviz.checkpoints.labels import resolve_class_names
from vitviz.imaging import Preprocessing
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
    user = dict(source.user)
    known = frozenset(f.name for f in dataclasses.fields(config_cls))
    unknown = sorted(set(user) - known - EXTRAS)
    if unknown:
        raise CheckpointError(
            f"{source.name}: unknown settings {', '.join(unknown)} for a pyramid ViT; accepted: "
            f"its config fields ({', '.join(sorted(known))}), class_names, preprocessing."
        )
    fields = dict(inferred)
    for key in sorted(set(user) & known):
        fields[key] = user[key]
    try:
        config = config_cls(**fields)
        config.validate()
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{source.name}: the {family} settings are invalid: {exc}") from exc
    given = user.get("class_names")
    if given is not None and (not isinstance(given, list) or len(given) != config.num_classes):
        raise CheckpointError(
            f"{source.name}: class_names must be a list of {config.num_classes} names."
        )
    names = resolve_class_names(config.num_classes, given, class_names, True)
    prep = {"image_size": list(config.image_size), **preprocessing}
    if isinstance(user.get("preprocessing"), dict):
        prep.update(user["preprocessing"])
    prep["channels"] = check_channels(source, prep.get("channels"), config.in_channels)
    try:
        prepared = Preprocessing.from_dict(prep)
    except ValueError as exc:
        raise CheckpointError(f"{source.name}: the preprocessing is invalid: {exc}") from exc
    return Conversion(
        family=family,
        config=config,
        state=state,
        class_names=names,
        preprocessing=prepared,
        notes=notes,
        kind="pyramid",
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
