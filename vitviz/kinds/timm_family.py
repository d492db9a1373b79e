"""The steps the kinds' timm families share. Those of one patch grid with a CLS token (CaiT,
ConViT, XCiT): refusing model arguments vitviz does not model, taking the stem and head
tensors, reading the image size, the user's settings over what the weights said, and the
preprocessing and Conversion; the others' (CrossViT, MobileViT, MViTv2, PiT, TNT, VOLO): their
Conversion from timm's preprocessing and class names (``finish_timm_kind`` of a ``TimmKind``).

Each family keeps its own blocks, names and words; these say them the same way for all.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from torch import Tensor

from vitviz.checkpoints.errors import CheckpointError
from vitviz.checkpoints.families.base import Conversion, Source
from vitviz.checkpoints.families.common import (
    KIND_EXTRAS,
    Taker,
    aligned_state,
    finish_kind,
    grid_from_table,
    prepared_preprocessing,
)
from vitviz.checkpoints.labels import names_from_timm, resolve_class_names
from vitviz.checkpoints.preprocessing import timm_preprocessing


def refuse_model_args(
    source: Source,
    args: Mapping[str, Any],
    known: Collection[str],
    model: str,
    *,
    pool_note: str = "",
    pos_embed: bool = False,
) -> None:
    """CheckpointError naming each of timm's ``model_args`` outside ``known`` (sizes, training)
    that changes the computation: any unknown one, a ``global_pool`` but "token" (said with
    ``pool_note``) and, with ``pos_embed``, ``use_pos_embed`` False."""
    extra = {"global_pool", "use_pos_embed"} if pos_embed else {"global_pool"}
    changed = sorted(set(args) - set(known) - extra)
    if args.get("global_pool", "token") != "token":
        changed.append(f"global_pool {args['global_pool']!r}{pool_note}")
    if pos_embed and args.get("use_pos_embed", True) is not True:
        changed.append("use_pos_embed False")
    if changed:
        raise CheckpointError(
            f"{source.name}: timm {model} model_args {', '.join(changed)} change the computation "
            "and vitviz does not model them; refused rather than shown wrong."
        )


def take_linear(
    t: Taker, old: str, out: dict[str, Tensor], new: str | None = None, bias: bool = True
) -> None:
    """``old``'s weight (and bias) into ``out`` as ``new`` (default ``old``); a missing bias is
    refused where ``bias`` says the layer has one."""
    new = old if new is None else new
    out[new + ".weight"] = t.take(old + ".weight")
    b = t.maybe(old + ".bias")
    if b is not None:
        out[new + ".bias"] = b
    elif bias:
        raise CheckpointError(
            f"{t.source.name} looks like {t.looks_like}, but {old}.bias is missing."
        )


def take_stem_and_head(t: Taker, out: dict[str, Tensor]) -> tuple[Tensor, Tensor, int]:
    """``cls_token``, ``pos_embed``, ``patch_embed.proj``, ``norm`` and the optional ``head``
    into ``out`` (our names are timm's); (pos_embed (1, P, D), the patch weight (D, C, p, p),
    the head's classes, 0 without one)."""
    out["cls_token"] = t.take("cls_token")
    out["pos_embed"] = pos = t.take("pos_embed")
    out["patch_embed.proj.weight"] = patch = t.take("patch_embed.proj.weight")
    out["patch_embed.proj.bias"] = t.take("patch_embed.proj.bias")
    out["norm.weight"] = t.take("norm.weight")
    out["norm.bias"] = t.take("norm.bias")
    num_classes = 0
    if "head.weight" in t:
        out["head.weight"] = t.take("head.weight")
        out["head.bias"] = t.take("head.bias")
        num_classes = out["head.weight"].shape[0]
    return pos, patch, num_classes


def said_image_size(args: Mapping[str, Any], pretrained: Mapping[str, Any]) -> Any:
    """The image size timm's config.json says: ``model_args`` img_size, else the
    pretrained_cfg's input_size (H, W); None when neither does."""
    size = args.get("img_size")
    if size is None and isinstance(pretrained.get("input_size"), (list, tuple)):
        size = list(pretrained["input_size"][1:])
    return size


def table_image_size(
    source: Source,
    args: Mapping[str, Any],
    pretrained: Mapping[str, Any],
    patches: int,
    patch: int,
    notes: list[str],
    not_square: str,
) -> Any:
    """The image size said (``said_image_size``), else the square grid of the position
    table's ``patches`` times ``patch`` (noted); a table that is no square grid is refused,
    its message ending with ``not_square`` (what to do, or why it must be square)."""
    size = said_image_size(args, pretrained)
    if size is None:
        grid = grid_from_table(patches)
        if grid is None:
            raise CheckpointError(
                f"{source.name}: pos_embed has {patches} patches, not a square grid{not_square}"
            )
        size = [grid[0] * patch, grid[1] * patch]
        notes.append(f"image size {size[0]}×{size[1]} read off the square position table")
    return size


def settings_config(
    source: Source,
    user: Mapping[str, Any],
    inferred: Mapping[str, Any],
    config_cls: Callable[..., Any],
    fields: Collection[str],
    words: tuple[str, str],
    *,
    validate: bool = False,
) -> Any:
    """``config_cls`` from what the weights said with the user's config ``fields`` over it
    (``validate``: its ``validate`` run too); ``words`` = (a model, the model), e.g. ("a CaiT",
    "CaiT"). Settings that are neither fields nor class_names, preprocessing, arch are refused
    by name; invalid ones in one line."""
    a_model, model = words
    unknown = sorted(set(user) - set(fields) - KIND_EXTRAS)
    if unknown:
        raise CheckpointError(
            f"{source.name}: unknown settings {', '.join(unknown)} for {a_model}; accepted: "
            f"{model} config fields, class_names, preprocessing."
        )
    given = {**inferred, **{k: v for k, v in user.items() if k in fields}}
    try:
        config = config_cls(**given)
        if validate:
            config.validate()
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{source.name}: the {model} settings are invalid: {exc}") from exc
    return config


def check_table(source: Source, config: Any, patches: int) -> None:
    """The position table's ``patches`` must be the image size's grid."""
    if config.num_patches != patches:
        raise CheckpointError(
            f"{source.name}: pos_embed holds {patches} patches, the image size "
            f"{config.image_size[0]}×{config.image_size[1]} gives {config.num_patches}."
        )


def timm_preprocessing_noted(
    source: Source,
    pretrained: Mapping[str, Any],
    defaults: Mapping[str, Any],
    notes: list[str],
    default_word: str | None,
) -> dict[str, Any]:
    """timm's preprocessing of the folder's ``pretrained_cfg`` (``defaults`` where it says
    none), its notes added to ``notes``; for a bare file (no config.json) and a
    ``default_word`` (e.g. "Swin"), a note that the preprocessing is timm's default of it."""
    prep, prep_notes = timm_preprocessing(pretrained, defaults)
    notes += prep_notes
    if default_word is not None and not pretrained:
        notes.append(
            f"no timm config.json beside the file: preprocessing is timm's {default_word} "
            f"default (set preprocessing in {source.sidecar_name} to change it)"
        )
    return prep


def timm_conversion(
    source: Source,
    *,
    family: str,
    kind: str,
    config: Any,
    state: dict[str, Tensor],
    num_classes: int,
    defaults: Mapping[str, Any],
    notes: list[str],
    default_word: str | None = None,
) -> Conversion:
    """The Conversion of a timm family: class names (the user's, timm's config.json's or
    ImageNet's for 1000 classes), timm's preprocessing (``defaults`` where config.json says
    none; with ``default_word``, e.g. "CaiT", a bare file's note says so) and the notes."""
    cfg = source.timm_config or {}
    pretrained: dict[str, Any] = dict(cfg.get("pretrained_cfg") or {})
    user = source.user
    names = resolve_class_names(
        num_classes, user.get("class_names"), names_from_timm(cfg, num_classes), True
    )
    prep_dict = timm_preprocessing_noted(source, pretrained, dict(defaults), notes, default_word)
    prepared = prepared_preprocessing(source, config, prep_dict, user, notes)
    return Conversion(
        family=family,
        config=config,
        state=state,
        class_names=names,
        preprocessing=prepared,
        notes=notes,
        kind=kind,
    )


@dataclass(frozen=True)
class TimmKind:
    """What a timm family of a kind says the same way on every conversion: the kind, its config
    class, (a model, the model) in words (e.g. ("a PiT", "PiT")), the family's name, the
    preprocessing where config.json says none, and the fields beyond the config's."""

    kind: str
    config_cls: type
    model: tuple[str, str]
    family: str
    defaults: Mapping[str, Any]
    extras: frozenset[str] = KIND_EXTRAS


def finish_timm_kind(
    source: Source,
    of: TimmKind,
    inferred: dict[str, Any],
    num_classes: int,
    notes: list[str],
    preprocessing: tuple[dict[str, Any], list[str]] | None = None,
) -> Conversion:
    """``finish_kind`` for the timm family ``of``: the source's tensors in aligned storage,
    timm's class names (ImageNet's for 1000 classes) and its preprocessing (``of.defaults``
    where config.json says none; ``preprocessing``: (fields, notes) already read)."""
    cfg = source.timm_config or {}
    if preprocessing is None:
        pretrained: dict[str, Any] = dict(cfg.get("pretrained_cfg") or {})
        preprocessing = timm_preprocessing(pretrained, of.defaults)
    prep, prep_notes = preprocessing
    a_model, word = of.model
    return finish_kind(
        source,
        kind=of.kind,
        config_cls=of.config_cls,
        words=(a_model, "its config fields", word),
        extras=of.extras,
        family=of.family,
        inferred=inferred,
        state=aligned_state(source.state),
        class_names=names_from_timm(cfg, num_classes),
        preprocessing=prep,
        notes=notes + prep_notes,
        imagenet_if_1000=True,
    )


def timm_name(
    source: Source,
    shape: Mapping[str, Any],
    recognised: Callable[[Mapping[str, Any]], str | None],
    known: Collection[str],
    model: str,
) -> tuple[str | None, bool, list[str]]:
    """(the timm name: the user's ``arch``, the folder's ``architecture`` or the one
    ``recognised(shape)`` finds; whether the user gave it; notes); CheckpointError in one line
    for a name whose base is not one of ``known`` (``model``: "MViTv2", "TNT")."""
    user_arch = source.user.pop("arch", None)
    name = user_arch or (source.timm_config or {}).get("architecture")
    notes: list[str] = []
    if name is None:
        name = recognised(shape)
        if name is not None:
            notes.append(f"recognised as timm's {name} from its tensors")
    if name is not None and name.split(".")[0] not in known:
        raise CheckpointError(
            f"{source.name}: timm's {name} is no {model} vitviz knows (one of {', '.join(known)})."
        )
    return name, user_arch is not None, notes
