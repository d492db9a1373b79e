"""Where each computation setting of a timm ViT state dict that names no architecture comes from.

A bare state dict shows its tensors (widths, depth, tokens, fc_norm, the position table's
length) and nothing else. Each setting that changes the computation then comes from the user
(``--heads``, ``--config`` / the sidecar), the file (what the tensors show), or a convention,
and a convention only where timm ties it to what the tensors show (DESIGN §4):

- pooling: ``fc_norm`` present ⇔ mean pooling (timm's ``fc_norm=None``), no class token ⇒ mean,
  an attention pool ⇒ MAP; else CLS pooling;
- heads: width / 64 for the widths timm's names give width / 64 heads (192, 384, 768, ...);
- the grid: square when the position table less the prefix tokens is a square and the whole
  table is not (timm's names are square).

What neither says (the activation, other heads, a table that fits a non-square grid with the
class token as well as a square one without it) is asked for: ``MissingSettingsError`` naming
the flags and keys that settle it, with the value timm would use as the dialog's guess.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from vitviz.checkpoints.errors import CheckpointError, MissingSettingsError
from vitviz.checkpoints.families.base import Source
from vitviz.checkpoints.families.common import STANDARD_HEADS, example_heads, grid_from_table

ACTIVATIONS = ("gelu", "gelu_tanh", "quick_gelu")
POOL_WORDS = {"token": "CLS pooling", "avg": "mean pooling", "map": "attention pooling (MAP)"}
# How each asked setting is given: the CLI flag where there is one, else the settings key.
HOW = {
    "heads": "--heads N",
    "activation": '"activation" (gelu, gelu_tanh or quick_gelu)',
    "global_pool": '"global_pool" (token or avg)',
    "image_size": '"image_size" ([height, width])',
}


@dataclass
class Resolved:
    """Settings with their source: ``values`` (ViTConfig fields), ``assumed`` (field -> why,
    the conventions used), ``asked`` (field -> timm's value, the guess a dialog shows)."""

    values: dict[str, Any] = field(default_factory=dict)
    assumed: dict[str, str] = field(default_factory=dict)
    asked: dict[str, Any] = field(default_factory=dict)
    user: set[str] = field(default_factory=set)

    def take(self, key: str, value: Any, why: str | None = None) -> None:
        self.values[key] = value
        if why is not None:
            self.assumed[key] = why


def conventional_heads(dim: int) -> int | None:
    """timm's head count for a width its names use with heads of 64 (192 -> 3, 768 -> 12)."""
    heads = STANDARD_HEADS.get(dim)
    return heads if heads is not None and heads * 64 == dim else None


def resolve_bare(
    source: Source,
    inferred: Mapping[str, Any],
    guess: Mapping[str, Any],
    pos_layout: tuple[int, int] | None,
    has_pool: bool = False,
) -> Resolved:
    """The settings of a timm ViT state dict that names no architecture, each from the user,
    the tensors or a tied convention; the rest in ``asked``. ``guess``: the settings of the timm
    name the tensors fit, if one does (the guesses offered, never used unasked); ``has_pool``:
    an attention pool's tensors are there."""
    user = source.user
    out = Resolved(user={k for k in ("heads", "activation", "global_pool") if k in user})
    dim = int(inferred["dim"])
    if "heads" not in user:
        heads = conventional_heads(dim)
        if heads is not None:
            out.take("heads", heads, f"timm's names of width {dim} have {heads} heads of 64")
        else:
            out.asked["heads"] = guess.get("heads") or example_heads(dim)
    if "activation" not in user:
        out.asked["activation"] = guess.get("activation") or "gelu"
    pool = user.get("global_pool")
    if pool is None:
        pool, why = conventional_pool(inferred, has_pool)
        out.take("global_pool", pool, why)
    check_pool(source, pool)
    out.values["global_pool"] = pool
    resolve_grid(source, inferred, guess, pos_layout, out)
    return out


def conventional_pool(inferred: Mapping[str, Any], has_pool: bool) -> tuple[str, str | None]:
    """(timm's pooling for what the tensors show, why; None when the tensors fix it).
    ``has_pool``: the attention pool's tensors are there."""
    if has_pool:
        return "map", None  # the attention pool's tensors are there
    if not inferred["class_token"]:
        return "avg", "no class token: timm pools the mean"
    if inferred["fc_norm"]:
        return "avg", "fc_norm is present, which timm pairs with mean pooling"
    return "token", "no fc_norm, which timm pairs with CLS pooling"


def check_pool(source: Source, pool: Any) -> None:
    """Refuse a pooling vitviz's ViT does not compute, naming it."""
    if pool == "":
        raise CheckpointError(
            f"{source.name}: global_pool '' gives a logit per token (no pooling), which vitviz "
            "does not show; refused rather than shown as one token's logits."
        )


def resolve_grid(
    source: Source,
    inferred: Mapping[str, Any],
    guess: Mapping[str, Any],
    pos_layout: tuple[int, int] | None,
    out: Resolved,
) -> None:
    """The image size and whether the position table covers the prefix tokens
    (``no_embed_class``), from the user's ``image_size`` / ``no_embed_class`` or the table's
    length; asked for when the length fits two layouts."""
    if pos_layout is None:
        return  # no table: the size is the user's or asked for by the converter
    n, prefix = pos_layout
    p = int(inferred["patch_size"])
    size = source.user.get("image_size")
    stated = source.user.get("no_embed_class")
    if size is not None:
        h, w = (size, size) if isinstance(size, int) else (int(size[0]), int(size[1]))
        patches = (h // p) * (w // p)
        fits = {False: patches + prefix == n, True: patches == n and prefix > 0}
        if (stated is not None and not fits[bool(stated)]) or not any(fits.values()):
            raise _table_mismatch(source, n, prefix, h, w, patches)
        if stated is None:
            out.values["no_embed_class"] = fits[True]
        return
    layouts = {False: grid_from_table(n - prefix), True: grid_from_table(n) if prefix else None}
    if stated is None and "no_embed_class" in guess:  # the timm names these tensors fit
        stated = bool(guess["no_embed_class"])
    elif stated is None and (layouts[False] is None) != (layouts[True] is None):
        stated = layouts[True] is not None
        if stated:  # a square table of the patches alone, or a non-square one with CLS
            out.asked["image_size"] = _guess_size(n, prefix, p, True)
            return
    if stated is None or layouts[bool(stated)] is None:
        out.asked["image_size"] = _guess_size(n, prefix, p, bool(stated))
        return
    grid = layouts[bool(stated)]
    out.values["no_embed_class"] = bool(stated)
    out.take("image_size", (grid[0] * p, grid[1] * p), "square, from the position table")


def _guess_size(n: int, prefix: int, p: int, without_prefix: bool) -> list[int]:
    grid = grid_from_table(n if without_prefix else n - prefix)
    side = grid[0] * p if grid is not None else 224
    return [side, side]


def _table_mismatch(
    source: Source, n: int, prefix: int, h: int, w: int, patches: int
) -> CheckpointError:
    return CheckpointError(
        f"{source.name}: image_size {h}×{w} makes {patches} patches, but the position table "
        f"has {n} entries, which fit neither {patches} + {prefix} prefix "
        f"(no_embed_class false) nor {patches} (no_embed_class true); give the image size the "
        f"model was trained at."
    )


def ask_message(source: Source, out: Resolved, looks_like: str, fits: str | None = None) -> str:
    """One line naming each setting the weights can't say and how to give it, and the
    conventions that stand unless given."""
    asked = out.asked
    flags = [HOW.get(k, f'"{k}"') for k in asked]
    example = ", ".join(f'"{k}": {_json(v)}' for k, v in asked.items())
    extra = ""
    if "image_size" in asked:
        extra = (
            " (the position table's length fits more than one grid, or only a non-square "
            "one; whether it covers the class token, no_embed_class, follows from the size)"
        )
    standing = ""
    if out.assumed:
        listed = "; ".join(f"{shown(k, out.values[k])} ({HOW.get(k, k)})" for k in out.assumed)
        standing = f" Assumed unless given: {listed}."
    arch = f"--arch {fits} (the timm name its tensors fit)" if fits else "--arch NAME"
    return (
        f"{source.name} looks like {looks_like} that names no architecture; the weights don't "
        f"say: {', '.join(asked)}{extra}. Give {', '.join(flags)} (keys in "
        f"{source.sidecar_name} or a --config FILE, e.g. {{{example}}}), or {arch} to "
        f"take a timm name's settings.{standing}"
    )


def ask(source: Source, out: Resolved, looks_like: str, fits: str | None = None) -> None:
    """Raise the one-line MissingSettingsError for what neither the user nor a convention
    gives; the conventions used ride along for the window's dialog. ``fits``: the timm name
    the tensors fit, if one does."""
    if not out.asked:
        return
    assumed = {k: out.values[k] for k in out.assumed}
    raise MissingSettingsError(ask_message(source, out, looks_like, fits), out.asked, assumed)


def shown(key: str, value: Any) -> str:
    """'heads 3', 'CLS pooling', 'image_size 32×32'."""
    if key == "global_pool":
        return POOL_WORDS.get(value, f"global_pool {value!r}")
    if key == "image_size":
        return f"image_size {value[0]}×{value[1]}"
    return f"{key} {value}"


def assumed_notes(out: Resolved) -> list[str]:
    """One note per convention used: 'assumed heads 3: timm's names ... (--heads N if not)'."""
    notes = []
    for key, why in out.assumed.items():
        how = HOW.get(key, f'"{key}"')
        notes.append(f"assumed {shown(key, out.values[key])}: {why} (if not, give {how})")
    return notes


def _json(value: Any) -> str:
    import json

    return json.dumps(list(value) if isinstance(value, tuple) else value)
