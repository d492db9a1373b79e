"""Which timm architecture a timm-layout checkpoint is, and what that fixes of its computation.

The name comes from the user's ``arch`` setting (``--arch NAME``), else the folder's config.json
``architecture`` (with its ``model_args``); a bare state dict is recognised by the signature of
its tensors (see ``timm_arch``). Returns the ViTConfig fields the name fixes, or None when the
checkpoint names nothing and matches no timm architecture (it then opens as the common ViT,
with the assumption noted by the converter). Parts vitviz doesn't model are refused by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vitviz.checkpoints.assign import few
from vitviz.checkpoints.errors import CheckpointError
from vitviz.checkpoints.families.base import Source
from vitviz.checkpoints.families.common import grid_from_table
from vitviz.checkpoints.families.timm_library import LIBRARY_MODEL
from vitviz.checkpoints.library_check import Reference
from vitviz.kinds.vit.families.timm_arch import (
    ArchError,
    ArchRecord,
    candidates,
    computes_alike,
    record_for,
    signature_of,
)

# Settings the weights show (key presence); a named architecture must agree with them.
SHOWN_BY_WEIGHTS = (
    "class_token",
    "distill_token",
    "num_register_tokens",
    "qkv_bias",
    "pre_norm",
    "fc_norm",
    "final_norm",
    "pos_embed",
    "layer_scale",
    "qk_norm",
    "parallel",
    "branches",
    "attn_norm",
    "mlp_norm",
)
USER_OVERRIDES = ("heads", "activation", "global_pool", "norm_eps")
ACT_NAMES = {"gelu": "GELU", "gelu_tanh": "GELU (tanh)", "quick_gelu": "QuickGELU", "relu": "ReLU"}


def how_to_name(source: Source) -> str:
    return f'--arch NAME (a timm model name) or "arch" in {source.sidecar_name}'


@dataclass(frozen=True)
class Choice:
    """The timm architecture a checkpoint is: its record, the note saying so, and the
    reference the library check builds."""

    record: ArchRecord
    note: str
    reference: Reference
    own_sizes: bool = True  # False: the user named it for tensors of other sizes (its heads
    # then say nothing of theirs)
    named: bool = True  # False: only recognised by its tensors (its settings are guesses)
    by_user: bool = False  # named by the user's arch (a fine-tune of it may differ)


def choose_architecture(
    source: Source,
    cfg: Mapping[str, Any],
    model_args: Mapping[str, Any],
    pos_layout: tuple[int, int] | None = None,
) -> Choice | None:
    """The checkpoint's timm architecture: named (``arch`` setting, else config.json), or
    recognised by the signature of its tensors; None when it names none and no timm name has
    its tensors. Called before any tensor is taken, so a part vitviz doesn't model is refused
    by name before the tensors it would leave over. ``pos_layout``: (entries of the position
    table, prefix tokens), which tells whether the table covers the prefix tokens."""
    name = source.user.get("arch")
    args: Mapping[str, Any] = {}
    if name is None:
        name, args = cfg.get("architecture"), model_args
    if name is not None:
        if not isinstance(name, str):
            raise CheckpointError(f"{source.name}: the architecture must be a timm model name.")
        try:
            rec, where = record_for(name, args)
        except ArchError as exc:
            raise CheckpointError(f"{source.name}: {exc}.") from exc
        refuse_part(source, rec)
        by_user = source.user.get("arch") is not None
        named = f", named by {source.config_from}," if source.config_from and not by_user else ""
        note = f"architecture {name}{named} as {where} defines it: {summary(rec.settings)}"
        if by_user:  # the name's settings stand for a fine-tune's: an assumption, said so
            yours = [k for k in USER_OVERRIDES if k in source.user]
            merged = {**rec.settings, **{k: source.user[k] for k in yours}}
            given = f" (yours: {', '.join(yours)})" if yours else ""
            note = (
                f"assumed from timm's {name} (the arch given), as {where} defines it: "
                f"{summary(merged)}{given}; if the weights were trained with others give "
                f'--heads N, "activation", "global_pool" or "image_size"'
            )
        own = source.user.get("arch") is None or rec.signature in _head_norm_signatures(
            source.state
        )
        ref = Reference("timm", name, dict(args), how=LIBRARY_MODEL)
        return Choice(rec, note, ref, own, by_user=by_user)
    found = [
        r
        for r in candidates(signature_of(source.state))
        if _fits_user(r, source.user) and _fits_table(r, pos_layout)
    ]
    found.sort(key=lambda r: (not r.name.startswith("vit_"), r.name))
    if not found:
        return None
    names = [r.name for r in found]
    if not computes_alike(found):
        raise CheckpointError(
            f"{source.name}: its tensors fit timm architectures that compute differently "
            f"({differences(found)}); say which with {how_to_name(source)}."
        )
    refuse_part(source, found[0], names)
    others = f" and {len(names) - 1} other names computing alike" if len(names) > 1 else ""
    note = (
        f"recognised as timm's {names[0]}{others} by its tensors: "
        f"{summary(found[0].settings)}; if it is another, give {how_to_name(source)}"
    )
    return Choice(found[0], note, Reference("timm", names[0], {}, how=LIBRARY_MODEL), named=False)


def layout_guess(source: Source) -> dict[str, Any]:
    """``{"no_embed_class": v}`` when every timm name with these tensors says the same, whether
    or not its table fits a square grid (a user's setting no such name has, e.g. another
    activation, or a non-square grid, leaves the layout the tensors share with them); {}
    otherwise."""
    found = candidates(signature_of(source.state))
    values = {r.settings.get("no_embed_class") for r in found if r.settings}
    return {"no_embed_class": values.pop()} if len(values) == 1 and None not in values else {}


# Layouts of a bare state dict that timm architectures computing differently from the common ViT
# share, checked when no timm name has its tensors: (what the tensors show, who has it, the
# settings a user states to open it as the common ViT all the same).
NO_POSITIONS = (
    "no position table nor relative position tensors",
    "rotary ViTs, whose positions are computed: vit_*_rope_*, DINOv3's vit_*_dinov3*",
    ("rope",),
)
NORM_BEFORE_BLOCKS = (
    "a norm before the blocks and no patch bias",
    "CLIP's vit_*_clip_* with LayerNorm eps 1e-5 and GELU or QuickGELU, and the rotary "
    "Perception Encoder vit_pe_*",
    ("rope", "norm_eps", "activation"),
)
PE_ONLY = (
    "a norm before the blocks, no patch bias and {what}",
    "the rotary Perception Encoder {names}; timm's ViTs have no such layout",
    ("rope",),
)


def ambiguous_layout(state: Mapping[str, Any]) -> tuple[str, str, tuple[str, ...]] | None:
    """(what the tensors show, the timm architectures with it, the settings that open it all the
    same) when a bare state dict no timm name has could be an architecture computing
    differently from the common ViT (rotary positions have no tensors); None when its layout
    is the plain ViT's alone."""
    relative = any(".rel_pos." in k or k.startswith("shared_rel_pos.") for k in state)
    if "pos_embed" not in state and not relative:
        return NO_POSITIONS
    if "norm_pre.weight" not in state or "patch_embed.proj.bias" in state:
        return None
    shows, who, needs = PE_ONLY
    if "attn_pool.latent" in state:
        return shows.format(what="an attention pool"), who.format(names="vit_pe_core_*"), needs
    if "norm.weight" not in state and "fc_norm.weight" not in state:
        return shows.format(what="no final norm"), who.format(names="vit_pe_spatial_*"), needs
    return NORM_BEFORE_BLOCKS


def refuse_ambiguous(source: Source) -> None:
    """Refuse, in one line, a bare state dict no timm name has whose layout architectures
    computing differently share (see ``ambiguous_layout``), unless the user named it
    (``arch``, read before) or stated what tells them apart (``"rope": "none"``, and for
    CLIP's layout ``norm_eps`` and ``activation``)."""
    found = ambiguous_layout(source.state)
    if found is None:
        return
    shows, who, needs = found
    if source.user.get("rope") == "none" and all(k in source.user for k in needs):
        return
    stated = ", ".join(['"rope": "none"', *(f'"{k}"' for k in needs[1:])])
    raise CheckpointError(
        f"{source.name}: no timm name has these tensors, and their layout ({shows}) is that of "
        f"timm architectures that compute differently from the common ViT ({who}); say which "
        f"with {how_to_name(source)} (and --heads N if its sizes are not the name's), or set "
        f"{stated} in {source.sidecar_name} if it is a plain ViT without rotary positions."
    )


def refuse_part(source: Source, rec: ArchRecord, names: list[str] | None = None) -> None:
    """Refuse, naming the part, a record vitviz can't compute."""
    if rec.refusal is None:
        return
    who = rec.name if not names or len(names) == 1 else f"{few(names)} (the same tensors)"
    raise CheckpointError(
        f"{source.name}: {who} has {rec.refusal}, which vitviz does not model (refused "
        f"rather than shown with another network's numbers)."
    )


def applied(
    source: Source, rec: ArchRecord, inferred: Mapping[str, Any], by_user: bool = False
) -> dict[str, Any]:
    """The record's settings the weights can't show; those they show must agree (but for
    fc_norm of a name the user gave: a fine-tune of it may have changed its head's norm)."""
    settings = dict(rec.settings)
    shown = dict(inferred, layer_scale=inferred.get("layer_scale_init") is not None)
    free = ("fc_norm",) if by_user else ()
    for key in SHOWN_BY_WEIGHTS:
        if key in free:
            continue
        if key in settings and settings[key] != shown.get(key):
            raise CheckpointError(
                f"{source.name}: timm's {rec.name} has {key} {settings[key]!r}, but the "
                f"weights say {shown.get(key)!r}: they are not that architecture "
                f"(give the right one with {how_to_name(source)})."
            )
    return {k: v for k, v in settings.items() if k not in SHOWN_BY_WEIGHTS}


def summary(settings: Mapping[str, Any]) -> str:
    """'12 heads of 64, LayerNorm eps 1e-06, GELU, CLS pooling' style."""
    heads = settings.get("heads")
    width = settings.get("attn_head_dim")
    head_text = f"{heads} heads" + (f" of {width}" if width else "")
    pool = {"token": "CLS pooling", "avg": "average pooling"}.get(settings.get("global_pool"), "")
    act = ACT_NAMES.get(settings.get("activation", ""), str(settings.get("activation")))
    parts = [head_text, f"LayerNorm eps {settings.get('norm_eps'):g}", act, pool]
    if settings.get("pre_norm"):
        parts.append("norm before the blocks")
    return ", ".join(p for p in parts if p)


def differences(records: list[ArchRecord]) -> str:
    """'vit_a: heads 6; vit_b: rotary position ...' for up to four candidates."""
    keys = sorted({k for r in records for k in r.settings})
    varying = [k for k in keys if len({repr(r.settings.get(k)) for r in records}) > 1]
    shown = []
    for r in records[:4]:
        what = r.refusal or ", ".join(f"{k} {r.settings.get(k)!r}" for k in varying[:3])
        shown.append(f"{r.name}: {what}")
    more = f"; {len(records) - 4} more" if len(records) > 4 else ""
    return "; ".join(shown) + more


def _head_norm_signatures(state: Mapping[str, Any]) -> set[str]:
    """The signature of ``state``, and the one it has with its final norm moved to the other
    place (``norm`` <-> ``fc_norm``, which a fine-tune may change): the same sizes."""
    swap = {"norm.weight": "fc_norm.weight", "norm.bias": "fc_norm.bias"}
    swap.update({v: k for k, v in swap.items()})
    moved = {swap.get(k, k): v for k, v in state.items()}
    return {signature_of(state), signature_of(moved)}


def _fits_table(rec: ArchRecord, pos_layout: tuple[int, int] | None) -> bool:
    """False when the position table's length rules out the record's ``no_embed_class`` (a
    square grid of entries with or without the prefix tokens)."""
    if pos_layout is None or "no_embed_class" not in rec.settings:
        return True
    n, prefix = pos_layout
    covered = n if rec.settings["no_embed_class"] else n - prefix
    return grid_from_table(covered) is not None


def _fits_user(rec: ArchRecord, user: Mapping[str, Any]) -> bool:
    """False when the user's settings contradict the record (e.g. heads given)."""
    return all(rec.settings.get(k, v) == v for k, v in user.items() if k in rec.settings)
