"""timm ``VisionTransformer`` (and DeiT's ``VisionTransformerDistilled``) state dicts, .pth or
model.safetensors, with timm's config.json when it is next to them.

Keys: ``patch_embed.proj``, ``cls_token``, ``reg_token``, ``dist_token``, ``pos_embed``,
``norm_pre``, ``blocks.N.{norm1, attn.qkv, attn.proj, ls1.gamma, norm2, mlp.fc1, mlp.fc2,
ls2.gamma}``, ``norm``, ``fc_norm``, ``head``, ``head_dist``: already vitviz's own names, so
the conversion renames nothing but old DeiT-3 ``gamma_1/2``. What the weights don't say comes
from config.json (``model_args``, ``pretrained_cfg``) or is inferred and noted.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from vitviz.checkpoints.errors import CheckpointError
from vitviz.checkpoints.families.base import Conversion, Family, FamilyInfo, Source
from vitviz.checkpoints.families.common import (
    Taker,
    block_indices,
    check_depth,
    dropped,
    example_heads,
    finish,
    grid_from_table,
)
from vitviz.checkpoints.labels import names_from_timm
from vitviz.checkpoints.preprocessing import (
    TIMM_DEIT_DEFAULTS,
    TIMM_VIT_DEFAULTS,
)
from vitviz.checkpoints.unmodelled import unmodelled_timm_vit
from vitviz.kinds.timm_family import timm_preprocessing_noted
from vitviz.kinds.vit.families.timm_arch import from_table
from vitviz.kinds.vit.families.timm_check_args import common_reference, same_settings
from vitviz.kinds.vit.families.timm_resolve import (
    ACT_NAMES,
    Choice,
    applied,
    choose_architecture,
    how_to_name,
    layout_guess,
    refuse_ambiguous,
)
from vitviz.kinds.vit.families.timm_settings import (
    POOL_WORDS,
    Resolved,
    ask,
    assumed_notes,
    check_pool,
    conventional_pool,
    resolve_bare,
    shown,
)

LOOKS_LIKE = "a timm VisionTransformer"
PREFIX_TOKENS = ("cls_token", "dist_token", "reg_token")
# serial, parallel or branched blocks
_BLOCK = r"blocks\.(\d+)\.(?:attn\.qkv|in_proj|attns\.0\.attn\.qkv)\.weight$"


def detect(source: Source) -> bool:
    """timm's ViT layout; or any timm folder or training checkpoint naming a timm model (its
    named architecture then decides, so one that isn't a plain ViT is refused by name, not as
    an unknown layout) unless every key shares one prefix (a Lightning ``model.``)."""
    s = source.state
    vit_layout = "patch_embed.proj.weight" in s and any(
        k.endswith((".attn.qkv.weight", ".in_proj.weight")) and k.startswith("blocks.") for k in s
    )
    wrapped = len({k.split(".", 1)[0] for k in s}) == 1 and all("." in k for k in s)
    return vit_layout or (source.timm_config is not None and not wrapped)  # wrapped: look under


def _take_norm(t: Taker, theirs: str, ours: str, out: dict[str, Tensor]) -> bool:
    """A norm's weight (and a LayerNorm's bias: an RMSNorm has none) -> ``out``; False when the
    checkpoint has no such norm."""
    if f"{theirs}.weight" not in t:
        return False
    out[f"{ours}.weight"] = t.take(f"{theirs}.weight")
    bias = t.maybe(f"{theirs}.bias")
    if bias is not None:
        out[f"{ours}.bias"] = bias
    return True


def take_prefix_and_pos(t: Taker, out: dict[str, Tensor]) -> int:
    """The prefix tokens (``PREFIX_TOKENS``, each (1, n, D)) and the position table the
    checkpoint has -> ``out``; how many prefix tokens they are."""
    prefix = 0
    for name in PREFIX_TOKENS:
        token = t.maybe(name)
        if token is not None:
            out[name] = token
            prefix += token.shape[1]
    pos = t.maybe("pos_embed")
    if pos is not None:
        out["pos_embed"] = pos
    return prefix


def take_head(t: Taker, out: dict[str, Tensor]) -> int:
    """The classifier ``head`` (weight (C, D), bias) -> ``out``; C (0 without one)."""
    if "head.weight" not in t:
        return 0
    out["head.weight"] = t.take("head.weight")
    out["head.bias"] = t.take("head.bias")
    return int(out["head.weight"].shape[0])


SERIAL_LINEARS = ("attn.proj", "mlp.fc1", "mlp.fc2")
PARALLEL_LINEARS = ("attn_out_proj", "mlp_out_proj")
SUB_NORMS = (("attn.q_norm", "qk_norm"), ("attn.norm", "attn_norm"), ("mlp.norm", "mlp_norm"))


def take_blocks(t: Taker, depth: int, out: dict[str, Tensor]) -> dict[str, Any]:
    """Move ``blocks.N.*`` of timm's layout into ``out`` (its serial blocks, or its parallel
    ones: ``in_norm``, ``in_proj``, ``attn_out_proj``, ``mlp_out_proj``; or its blocks of
    several branches: ``attns.J.*``, ``ffns.J.*``); returns what they say about the config."""
    if "blocks.0.attns.0.attn.qkv.weight" in t:
        return take_branched_blocks(t, depth, out)
    parallel = "blocks.0.in_proj.weight" in t
    layer_scale, qkv_bias = False, True
    shown: dict[str, Any] = {"parallel": parallel, "qk_norm": False}
    for i in range(depth):
        b = f"blocks.{i}."
        norms = ("in_norm",) if parallel else ("norm1", "norm2")
        for name in norms:
            if not _take_norm(t, b + name, b + name, out):
                t.take(f"{b}{name}.weight")  # names the missing tensor
        for name in PARALLEL_LINEARS if parallel else SERIAL_LINEARS:
            out[f"{b}{name}.weight"] = t.take(f"{b}{name}.weight")
            out[f"{b}{name}.bias"] = t.take(f"{b}{name}.bias")
        proj = "in_proj" if parallel else "attn.qkv"
        out[f"{b}{proj}.weight"] = t.take(f"{b}{proj}.weight")
        bias = t.maybe(f"{b}{proj}.bias")
        if bias is not None:
            out[f"{b}{proj}.bias"] = bias
        elif parallel:
            out[b + "mlp_bias"] = t.take(b + "mlp_bias")
        qkv_bias = bias is not None
        subs = (("q_norm", "qk_norm"),) if parallel else SUB_NORMS
        for name, field in subs:
            if _take_norm(t, b + name, b + name, out):
                shown[field] = True
                if field == "qk_norm":
                    k = name.replace("q_norm", "k_norm")
                    if not _take_norm(t, b + k, b + k, out):
                        t.take(f"{b}{k}.weight")
        for j in ("",) if parallel else (1, 2):
            gamma = t.maybe(f"{b}ls{j}.gamma", f"{b}gamma_{j}")
            if gamma is not None:
                out[f"{b}ls{j}.gamma"] = gamma
                layer_scale = True
    first = "blocks.0.in_norm" if parallel else "blocks.0.norm1"
    hidden = out["blocks.0.mlp_out_proj.weight" if parallel else "blocks.0.mlp.fc1.weight"]
    return {
        **{k: v for k, v in shown.items() if v},
        **({"norm": "rmsnorm"} if f"{first}.bias" not in out else {}),
        "qkv_bias": qkv_bias,
        "layer_scale_init": 1.0 if layer_scale else None,
        "mlp_hidden_dim": hidden.shape[1] if parallel else hidden.shape[0],
    }


def _branch_count(t: Taker) -> int:
    """How many attention branches ``blocks.0.attns.J`` the checkpoint has."""
    return len({k.split(".")[3] for k in t.state if k.startswith("blocks.0.attns.")})


def take_branched_blocks(t: Taker, depth: int, out: dict[str, Tensor]) -> dict[str, Any]:
    """Move timm's ``ParallelThingsBlock``s (``blocks.N.attns.J.{norm, attn.*, ls.gamma}``,
    ``blocks.N.ffns.J.{norm, mlp.*, ls.gamma}``) into ``out`` under the same names; returns
    what they say about the config."""
    P = _branch_count(t)
    shown: dict[str, Any] = {"branches": P, "qk_norm": False, "attn_norm": False}
    shown["mlp_norm"] = False
    layer_scale, qkv_bias = False, True
    for i in range(depth):
        for j in range(P):
            a, f = f"blocks.{i}.attns.{j}.", f"blocks.{i}.ffns.{j}."
            for norm in (a + "norm", f + "norm"):
                if not _take_norm(t, norm, norm, out):
                    t.take(f"{norm}.weight")  # names the missing tensor
            for name in (a + "attn.proj", f + "mlp.fc1", f + "mlp.fc2"):
                out[f"{name}.weight"] = t.take(f"{name}.weight")
                out[f"{name}.bias"] = t.take(f"{name}.bias")
            out[a + "attn.qkv.weight"] = t.take(a + "attn.qkv.weight")
            bias = t.maybe(a + "attn.qkv.bias")
            if bias is not None:
                out[a + "attn.qkv.bias"] = bias
            qkv_bias = bias is not None
            for name, field in ((a + "attn.q_norm", "qk_norm"), (a + "attn.norm", "attn_norm"),
                                (f + "mlp.norm", "mlp_norm")):  # fmt: skip
                if _take_norm(t, name, name, out):
                    shown[field] = True
            if shown["qk_norm"] and not _take_norm(t, a + "attn.k_norm", a + "attn.k_norm", out):
                t.take(a + "attn.k_norm.weight")
            for branch in (a, f):
                gamma = t.maybe(branch + "ls.gamma")
                if gamma is not None:
                    out[branch + "ls.gamma"] = gamma
                    layer_scale = True
    return {
        **{k: v for k, v in shown.items() if v},
        **({"norm": "rmsnorm"} if "blocks.0.attns.0.norm.bias" not in out else {}),
        "qkv_bias": qkv_bias,
        "layer_scale_init": 1.0 if layer_scale else None,
        "mlp_hidden_dim": out["blocks.0.ffns.0.mlp.fc1.weight"].shape[0],
    }


def take_rel_pos(t: Taker, depth: int, out: dict[str, Tensor]) -> dict[str, Any]:
    """timm relpos's relative position bias (``blocks.N.attn.rel_pos.*`` per layer or
    ``shared_rel_pos.*``: an MLP on log offsets, or a table) -> vitviz's names; the config
    fields it shows ({} without one)."""
    shared = "shared_rel_pos.mlp.fc1.weight" in t
    where = ["shared_rel_pos."] if shared else [f"blocks.{i}.attn.rel_pos." for i in range(depth)]
    if not shared and f"{where[0]}mlp.fc1.weight" not in t:
        table = f"{where[0]}relative_position_bias_table"
        if table not in t:
            return {}
        for i, w in enumerate(where):
            out[f"blocks.{i}.attn.relative_position_bias_table"] = t.take(
                f"{w}relative_position_bias_table"
            )
        return {"rel_pos_bias": True}
    for w in where:
        ours = "shared_rel_pos." if shared else w
        if f"{w}mlp.fc2.bias" not in t:
            raise CheckpointError(
                f"{t.source.name}: a relative position MLP without an output bias (timm's "
                "'swin' mode, a sigmoid bias) is not supported."
            )
        for layer in ("fc1", "fc2"):
            for part in ("weight", "bias"):
                out[f"{ours}{layer}.{part}"] = t.take(f"{w}mlp.{layer}.{part}")
    hidden = int(out[f"{where[0]}fc1.weight"].shape[0])
    return {"rel_pos_bias": True, "rel_pos_mlp": hidden, "rel_pos_shared": shared}


POOL_PARTS = (("proj", "out_proj"), ("norm", "norm"), ("mlp.fc1", "fc1"), ("mlp.fc2", "fc2"))


def take_attention_pool(t: Taker, out: dict[str, Tensor]) -> bool:
    """timm's ``attn_pool`` (AttentionPoolLatent: a latent query, ``q`` and ``kv`` Linears,
    proj, norm, MLP) -> vitviz's ``pool`` (q, k, v rows packed as ``in_proj``); False when the
    checkpoint has none. A pool with several latent queries is refused."""
    if "attn_pool.latent" not in t:
        return False
    latent = t.take("attn_pool.latent")
    if latent.ndim != 3 or latent.shape[:2] != (1, 1):
        raise CheckpointError(
            f"{t.source.name}: an attention pool with {latent.shape[1]} latent queries is not "
            "supported (vitviz's MAP head has one probe)."
        )
    out["pool.probe"] = latent
    q_w, kv_w = t.take("attn_pool.q.weight"), t.take("attn_pool.kv.weight")
    out["pool.in_proj_weight"] = torch.cat([q_w, kv_w])
    out["pool.in_proj_bias"] = torch.cat([t.take("attn_pool.q.bias"), t.take("attn_pool.kv.bias")])
    for theirs, ours in POOL_PARTS:
        for part in ("weight", "bias"):
            out[f"pool.{ours}.{part}"] = t.take(f"attn_pool.{theirs}.{part}")
    return True


def take_patch_embed(
    t: Taker, out: dict[str, Tensor], in_channels: int, notes: list[str]
) -> tuple[int, int, int]:
    """``patch_embed.proj`` (Conv2d, or an old 2-D Linear) -> (dim, in_channels, patch)."""
    w = t.take("patch_embed.proj.weight")
    if w.ndim == 2:  # timm's first ViTs: Linear over (c p1 p2) patches, the same as the conv
        D, n = w.shape
        p = round((n / in_channels) ** 0.5)
        if in_channels * p * p != n:
            raise CheckpointError(
                f"{t.source.name}: can't read the patch size from "
                f"patch_embed.proj.weight {tuple(w.shape)}."
            )
        w = w.reshape(D, in_channels, p, p)
    out["patch_embed.proj.weight"] = w
    D, C, p, _ = w.shape
    bias = t.maybe("patch_embed.proj.bias")
    if bias is None:  # CLIP-style norm_pre models have no patch bias: adding 0 changes nothing
        bias = torch.zeros(D, dtype=w.dtype)
        notes.append("patch_embed.proj has no bias: a zero bias is used")
    out["patch_embed.proj.bias"] = bias
    return D, C, p


def _pos_layout(state: dict[str, Tensor]) -> tuple[int, int] | None:
    """(entries of the position table, prefix tokens) of a timm state dict, or None."""
    pos = state.get("pos_embed")
    if pos is None or pos.ndim != 3:
        return None
    prefix = sum(int(state[k].shape[1]) for k in PREFIX_TOKENS if k in state and state[k].ndim == 3)
    return int(pos.shape[1]), prefix


def recognised_note(source: Source, choice: Choice, resolved: Resolved) -> str:
    """The timm name a bare file's tensors fit, and which source gave each setting: the user,
    a convention (assumed), or the name (the rest)."""
    rec = choice.record.settings
    yours = [f"{k} {source.user[k]!r}" for k in ("heads", "activation", "global_pool")
             if k in source.user]  # fmt: skip
    assumed = [shown(k, resolved.values[k]) for k in resolved.assumed]
    named = f"LayerNorm eps {rec.get('norm_eps', 1e-6):g}"
    head = choice.note.split(":", 1)[0]  # "recognised as timm's X (and N others) by its tensors"
    return (
        f"{head}; settings by source: yours: {', '.join(yours) or 'none'}; assumed: "
        f"{', '.join(assumed) or 'none'}; the name's: {named}; if it is another, give "
        f"{how_to_name(source)}"
    )


def assumption_note(source: Source, resolved: Resolved, dim: int) -> str:
    """What a bare state dict matching no timm name is taken to be, by source."""
    values = resolved.values
    heads = int(source.user.get("heads", values.get("heads", 1)))
    act = source.user.get("activation", "?")
    given = ", ".join(sorted(resolved.user)) or "nothing"
    return (
        f"assumed timm's common ViT (no architecture named, and no timm name has these "
        f"tensors): {heads} heads of {dim // heads}, {ACT_NAMES.get(act, act)}, LayerNorm eps "
        f"1e-6, pre-norm blocks, no rotary positions (you gave: {given}); if yours differs "
        f"give {how_to_name(source)}"
    )


def _image_size(source: Source, args: dict[str, Any], pretrained: dict[str, Any]) -> Any:
    if args.get("img_size") is not None:
        return args["img_size"]
    size = pretrained.get("input_size")
    if isinstance(size, (list, tuple)) and len(size) == 3:
        return [int(size[1]), int(size[2])]
    return None


def _named_grid(
    source: Source,
    inferred: dict[str, Any],
    args: dict[str, Any],
    pretrained: dict[str, Any],
    pos: Tensor | None,
    p: int,
    prefix: int,
    notes: list[str],
) -> None:
    """The image size and table layout of a named architecture: the folder's or the name's,
    else read off a square table (noted)."""
    size = _image_size(source, args, pretrained)
    no_embed_class = inferred.pop("no_embed_class", args.get("no_embed_class"))
    if pos is not None:
        n = pos.shape[1]
        if size is not None:
            hw = (size, size) if isinstance(size, int) else tuple(size)
            patches = (hw[0] // p) * (hw[1] // p)
            if no_embed_class is None:
                no_embed_class = n == patches and prefix > 0
        else:
            with_prefix, without = grid_from_table(n - prefix), grid_from_table(n)
            if no_embed_class is None:
                no_embed_class = with_prefix is None and without is not None and prefix > 0
            grid = without if no_embed_class else with_prefix
            if grid is not None:
                size = (grid[0] * p, grid[1] * p)
                notes.append(
                    f"image size {size[0]}×{size[1]} inferred from the square position "
                    f"table; set image_size in {source.sidecar_name} if it was not "
                    f"square"
                )
    if size is not None:
        inferred["image_size"] = size
    inferred["no_embed_class"] = bool(no_embed_class)


def convert(source: Source) -> Conversion:
    cfg = source.timm_config or {}
    args: dict[str, Any] = dict(cfg.get("model_args") or {})
    pretrained: dict[str, Any] = dict(cfg.get("pretrained_cfg") or {})
    choice = choose_architecture(source, cfg, args, _pos_layout(source.state))
    layout = layout_guess(source) if choice is None else {}
    source.user.pop("arch", None)  # read: not a ViTConfig field
    if choice is None:  # before any tensor is taken: the layout decides
        named = unmodelled_timm_vit(list(source.state))
        if named is not None:  # timm's layout with a part only another architecture has
            raise CheckpointError(
                f"{source.name}: this is {named}, which vitviz does not model (refused rather "
                "than shown with another network's numbers)."
            )
        refuse_ambiguous(source)
    t = Taker(source, LOOKS_LIKE)
    notes: list[str] = []
    out: dict[str, Tensor] = {}
    depth = check_depth(source, block_indices(t.state, _BLOCK))
    D, C, p = take_patch_embed(t, out, int(args.get("in_chans", 3)), notes)
    prefix = take_prefix_and_pos(t, out)
    pos = out.get("pos_embed")
    for name in ("norm_pre", "norm", "fc_norm"):
        _take_norm(t, name, name, out)
    block_info = take_blocks(t, depth, out)
    has_pool = take_attention_pool(t, out)
    block_info.update(take_rel_pos(t, depth, out))
    num_classes = take_head(t, out)
    if "head_dist.weight" in t:
        out["head_dist.weight"] = t.take("head_dist.weight")
        out["head_dist.bias"] = t.take("head_dist.bias")
        notes.append(
            "DeiT distilled: the logits are the mean of head and head_dist, as timm "
            "gives them in eval mode"
        )
    gone = t.drop([k for k in list(t.state) if k.startswith("pre_logits.")])
    if gone:
        notes.append(dropped(gone, "timm's unused representation layer"))
    t.refuse_leftovers()

    has_cls, has_dist = "cls_token" in out, "dist_token" in out
    pool = cfg.get("global_pool", args.get("global_pool"))
    if pool is None and has_pool:
        pool = "map"
    elif pool is None:
        pool = "avg" if ("fc_norm.weight" in out or not has_cls) else "token"
    inferred: dict[str, Any] = dict(
        patch_size=p,
        in_channels=C,
        dim=D,
        depth=depth,
        num_classes=num_classes,
        class_token=has_cls,
        distill_token=has_dist,
        num_register_tokens=out["reg_token"].shape[1] if "reg_token" in out else 0,
        pos_embed="learned" if pos is not None else "none",
        global_pool=pool,
        fc_norm="fc_norm.weight" in out,
        pre_norm="norm_pre.weight" in out,
        final_norm="norm.weight" in out or "fc_norm.weight" in out,
        **block_info,
    )
    named = choice is not None and choice.named
    resolved = None
    if not named:  # a bare state dict: each setting from the user, the tensors or a convention
        guess = dict(choice.record.settings) if choice is not None else layout
        if choice is not None:
            inferred.update(applied(source, choice.record, inferred))
        for key in ("heads", "activation", "global_pool", "no_embed_class", "image_size"):
            inferred.pop(key, None)
        inferred.setdefault("norm_eps", 1e-6)
        resolved = resolve_bare(source, inferred, guess, _pos_layout(out), has_pool)
        ask(source, resolved, LOOKS_LIKE, choice.record.name if choice is not None else None)
        inferred.update(resolved.values)
        if choice is None:
            notes.append(assumption_note(source, resolved, D))
        else:
            notes.append(recognised_note(source, choice, resolved))
        notes.extend(assumed_notes(resolved))
        if has_pool and "pool_include_prefix" not in source.user:
            notes.append(
                "assumed the attention pool reads the patch tokens only; if it reads the "
                f"prefix tokens too, set pool_include_prefix in {source.sidecar_name}"
            )
    else:
        fc_norm = inferred["fc_norm"]
        inferred.update(applied(source, choice.record, inferred, choice.by_user))
        notes.append(choice.note)
        if choice.record.settings.get("fc_norm", fc_norm) != fc_norm:  # changed by a fine-tune
            inferred["fc_norm"] = fc_norm
            if "global_pool" not in source.user:
                inferred["global_pool"], why = conventional_pool(inferred, has_pool)
                notes.append(f"assumed {POOL_WORDS[inferred['global_pool']]}: {why} (if not, "
                             'give "global_pool")')  # fmt: skip
        if not choice.own_sizes:  # named for other sizes: its head count is not theirs
            for key in ("heads", "attn_head_dim"):
                inferred.pop(key, None)
    pool = source.user.get("global_pool", inferred["global_pool"])
    check_pool(source, pool)
    if pool not in ("token", "avg", "map") or ((pool == "map") != has_pool):
        raise CheckpointError(
            f"{source.name}: timm global_pool {pool!r} is not supported "
            f"(vitviz pools with 'token', 'avg', or 'map' with the attn_pool weights)."
        )
    if has_pool and out["pool.fc1.weight"].shape[0] != inferred["mlp_hidden_dim"]:
        raise CheckpointError(
            f"{source.name}: the attention pool's MLP is wider than the blocks' "
            f"({out['pool.fc1.weight'].shape[0]} vs {inferred['mlp_hidden_dim']}): not supported."
        )
    inferred["pos_embed_interp"] = "bicubic_antialias"
    if resolved is None:
        _named_grid(source, inferred, args, pretrained, pos, p, prefix, notes)

    defaults = TIMM_DEIT_DEFAULTS if has_dist else TIMM_VIT_DEFAULTS
    prep = timm_preprocessing_noted(
        source, pretrained, defaults, notes, "DeiT" if has_dist else "ViT"
    )
    conversion = finish(
        source,
        family="timm",
        looks_like=LOOKS_LIKE,
        inferred=inferred,
        required={"heads": example_heads(D), "image_size": 224},
        state=out,
        class_names=names_from_timm(cfg, num_classes),
        preprocessing=prep,
        notes=notes,
        imagenet_if_1000=True,
    )
    if choice is not None:
        conversion.reference = same_settings(choice.reference, choice.record.settings, conversion)
    else:  # timm's VisionTransformer with every setting, or a note naming what it can't have
        conversion.reference = common_reference(conversion.config)
    conversion.assumed = _assumed(source, resolved, choice, conversion)
    return conversion


NAME_SETTINGS = ("heads", "activation", "global_pool")  # what a fine-tune of a name may change


def _assumed(
    source: Source, resolved: Resolved | None, choice: Choice | None, conversion: Conversion
) -> dict[str, Any]:
    """The settings a convention gave (a bare file), or the name's defaults for those a
    fine-tune may change (an arch the user gave), with the values used."""
    cfg = conversion.config
    if resolved is not None:
        keys = [k for k in resolved.assumed if k not in source.user]
    elif choice is not None and choice.by_user:
        keys = [k for k in NAME_SETTINGS if k not in source.user]
    else:
        return {}
    return {k: list(v) if isinstance(v := getattr(cfg, k), tuple) else v for k in keys}


FAMILY = Family(
    "timm",
    detect,
    convert,
    info=FamilyInfo(
        label="timm VisionTransformer",
        names="vit_*, deit_*, deit3_*, flexivit_*, vit_relpos_*, vit_srelpos_*, "
        "vit_*_siglip_*, DINO / DINOv2 / CLIP towers in timm",
        forms="state dict (.pth, .safetensors); timm folder (config.json + model.safetensors)",
        parts=(
            "attention (relpos: with a relative position bias from an MLP or a table)",
            "pre-norm blocks",
            "GELU or QuickGELU MLP",
            "LayerScale",
            "learnt position table",
            "CLS, distillation and register tokens",
            "a LayerNorm before the blocks (CLIP)",
            "CLS, mean or attention pooling (MAP), fc_norm",
            "Conv2d patch embedding",
        ),
    ),
    knows_name=lambda name: from_table(name) is not None,
)
