"""timm ``Eva`` state dicts (EVA, EVA-02, timm's ``vit_*_rope_*``, DINOv3, Sapiens2; .pth or a
timm folder): rotary positions on the patches' q and k, fused ``qkv`` with ``q_bias``/``v_bias``
(k without bias) or ``q_proj``/``k_proj``/``v_proj`` (k and v with fewer heads under
grouped-query attention, Sapiens2's), qk-norm (``attn.q_norm``/``k_norm``), LayerNorm or RmsNorm,
LayerScale ``gamma_1``/``gamma_2`` (or ``gamma_1`` alone: the attention branch only), SwiGLU
(``fc1_g``/``fc1_x``, or GluMlp's packed ``fc1``), sub-LN (``attn.norm``, ``mlp.norm``), prefix
tokens with registers, CLS or mean pooling through ``fc_norm``, or (Perception Encoder core)
an attention pool (``attn_pool``, MAP) over every token with its own head count.

The rotary tables are computed, not stored: the architecture decides them. Its name comes from
``--arch``, else the folder's config.json (with its ``model_args``); a bare state dict is
recognised by its tensors' signature (timm's names with exactly these tensors) when every
candidate computes alike, else refused naming ``--arch``. timm (importable) is read for the
name's settings (a model built on the meta device); without timm such a file is refused.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from vitviz.checkpoints.assign import few
from vitviz.checkpoints.errors import CheckpointError
from vitviz.checkpoints.families.base import Conversion, Family, FamilyInfo, Source
from vitviz.checkpoints.families.common import (
    Taker,
    block_indices,
    check_depth,
    example_heads,
    finish,
    fuse_qkv,
    grid_from_table,
)
from vitviz.checkpoints.families.timm_library import LIBRARY_MODEL, timm_reference
from vitviz.checkpoints.library_check import Reference
from vitviz.checkpoints.preprocessing import TIMM_VIT_DEFAULTS, timm_preprocessing
from vitviz.core.optional import install_to_open
from vitviz.kinds.vit.families.sapiens2_names import has_meta_names, rename_meta
from vitviz.kinds.vit.families.timm import take_attention_pool
from vitviz.kinds.vit.families.timm_arch import CLASS_REASONS, candidates, from_table
from vitviz.kinds.vit.families.timm_arch import signature_of as signature
from vitviz.kinds.vit.families.timm_eva_arch import EvaRefusalError, build_meta, describe_eva

LOOKS_LIKE = "a timm EVA / rotary ViT"
EVA_REASONS = (CLASS_REASONS["Eva"], "Perception Encoder blocks (rotary attention)")
# Tensors only timm's Eva blocks have (BEiT's also have q_bias and gamma_1, with a bias table).
MARKERS = ("blocks.0.gamma_1", "blocks.0.attn.q_bias", "blocks.0.attn.q_proj.weight",
           "blocks.0.mlp.fc1_g.weight", "blocks.0.attn.norm.weight", "rope.freqs")  # fmt: skip
CONFIG_KEYS = ("rope", "rope_half", "rope_temperature", "rope_ref_grid", "rope_xy",
               "rope_offset", "heads", "attn_head_dim", "attn_norm", "mlp_norm", "swiglu",
               "norm_eps", "global_pool", "fc_norm", "final_norm", "pre_norm",
               "no_embed_class", "pool_heads", "pool_include_prefix", "norm", "qk_norm",
               "kv_heads", "layer_scale_mlp")  # fmt: skip


def _timm_loading(state: dict[str, Tensor], model: torch.nn.Module) -> dict[str, Tensor]:
    """The file's tensors as timm's own loading converts them (its ``checkpoint_filter_fn``:
    Sapiens2's original names to timm's), for the library check."""
    from timm.models.eva import checkpoint_filter_fn

    return checkpoint_filter_fn(state, model)


# The library check of a file under Sapiens2's original names: timm renames them itself
META_LIBRARY_MODEL = timm_reference(prepare=_timm_loading)


def _named(source: Source) -> tuple[str | None, dict[str, Any]]:
    name = source.user.get("arch")
    if name is not None:
        return name, {}
    cfg = source.timm_config or {}
    return cfg.get("architecture"), dict(cfg.get("model_args") or {})


def _is_eva_name(name: Any) -> bool:
    if not isinstance(name, str):
        return False
    rec = from_table(name)
    if rec is not None:
        return rec.refusal in EVA_REASONS
    try:
        return type(build_meta(name, {})).__name__ == "Eva"
    except Exception:  # noqa: BLE001 - no timm, or a name it doesn't know: not ours
        return False


def detect(source: Source) -> bool:
    s = source.state
    meta = has_meta_names(s)  # Sapiens2's original names (sapiens2_names)
    if "patch_embed.proj.weight" not in s and not meta:
        return False
    if "blocks.0.attn.relative_position_bias_table" in s:
        return False
    name, _ = _named(source)
    if name is not None:
        return _is_eva_name(name)
    if meta:
        return True
    found = candidates(signature(s))
    if found and not any(r.refusal in EVA_REASONS for r in found):
        return False  # timm names these tensors, none an EVA (a beit3's sub-LN: a plain ViT)
    if any(k in s for k in MARKERS):
        return True
    return bool(found) and all(r.refusal in EVA_REASONS for r in found)


def _settings(source: Source, name: str, args: dict[str, Any]) -> dict[str, Any]:
    try:
        model = build_meta(name, args)
    except ImportError as exc:
        raise CheckpointError(
            f"{source.name}: {install_to_open('timm', name)}: its rotary tables are computed "
            "from the architecture, not stored."
        ) from exc
    except Exception as exc:  # timm's own error for a name or argument
        raise CheckpointError(f"{source.name}: timm can't build {name} ({exc}).") from exc
    try:
        return describe_eva(model)
    except EvaRefusalError as exc:
        raise CheckpointError(
            f"{source.name}: {name} has {exc}, which vitviz does not model (refused rather "
            "than shown with another network's numbers)."
        ) from exc


def _own_sizes(source: Source, name: Any) -> bool:
    """Whether the tensors are the named architecture's own (its sizes, so its head count)."""
    try:
        model = build_meta(name, {})
    except Exception:  # noqa: BLE001 - no timm or an unknown name: _settings says so
        return True
    return signature({k: tuple(v.shape) for k, v in model.state_dict().items()}) == signature(
        source.state
    )


def _recognised(source: Source) -> tuple[str, dict[str, Any], str]:
    """(name, settings, note) of a bare state dict, from its tensors' signature."""
    how = f'--arch NAME (a timm model name) or "arch" in {source.sidecar_name}'
    found = [r.name for r in candidates(signature(source.state))]
    if not found:
        raise CheckpointError(
            f"{source.name}: a timm EVA / rotary ViT whose positions are computed by its "
            f"architecture, which the weights don't say (no timm name has these tensors); "
            f"name it with {how}."
        )
    described = {n: _settings(source, n, {}) for n in found}
    first = described[found[0]]
    differ = [n for n in found if {k: described[n].get(k) for k in CONFIG_KEYS}
              != {k: first.get(k) for k in CONFIG_KEYS}]  # fmt: skip
    if differ:
        raise CheckpointError(
            f"{source.name}: its tensors fit timm architectures that compute differently "
            f"({few([found[0], *differ])}); say which with {how}."
        )
    others = f" and {len(found) - 1} other names computing alike" if len(found) > 1 else ""
    return found[0], first, f"recognised as timm's {found[0]}{others} by its tensors"


def _check_shown(source: Source, name: str, rec: dict[str, Any]) -> None:
    """The parts the weights show must be the architecture's (else it is another one)."""
    s = source.state
    shown = {
        "a norm inside the attention (sub-LN)": ("blocks.0.attn.norm.weight" in s, "attn_norm"),
        "a norm inside the MLP (sub-LN)": ("blocks.0.mlp.norm.weight" in s, "mlp_norm"),
        "LayerScale": ("blocks.0.gamma_1" in s, "layer_scale"),
        "LayerScale on the MLP branch": ("blocks.0.gamma_2" in s, "layer_scale_on_mlp"),
        "a norm on each head's q and k (qk-norm)": ("blocks.0.attn.q_norm.weight" in s,
                                                    "qk_norm"),
        "a gated (SwiGLU) MLP": ("blocks.0.mlp.fc2.weight" in s and (
            "blocks.0.mlp.fc1_g.weight" in s or s["blocks.0.mlp.fc2.weight"].shape[1] * 2
            == s.get("blocks.0.mlp.fc1.weight", s["blocks.0.mlp.fc2.weight"]).shape[0]
        ), "swiglu"),
        "an attention-pool head (MAP)": ("attn_pool.latent" in s, "pool_heads"),
        "a class token": ("cls_token" in s, "class_token"),
    }  # fmt: skip
    rec = {**rec, "layer_scale_on_mlp": rec["layer_scale"] and rec["layer_scale_mlp"]}
    for part, (has, key) in shown.items():
        if has != bool(rec.get(key)):
            what = "have" if has else "lack"
            raise CheckpointError(
                f"{source.name}: the weights {what} {part}, timm's {name} "
                f"{'does not' if has else 'does'}: they are not that architecture (give the "
                f'right one with --arch NAME or "arch" in {source.sidecar_name}).'
            )


def _take_norm(t: Taker, name: str, out: dict[str, Tensor], rms: bool) -> None:
    """A norm's weight, and its bias unless it is an RMSNorm (which has none)."""
    for part in ("weight",) if rms else ("weight", "bias"):
        out[f"{name}.{part}"] = t.take(f"{name}.{part}")


def _take_attention(t: Taker, b: str, out: dict[str, Tensor], rows: list[int]) -> bool:
    """q/k/v of block ``b`` into vitviz's fused ``qkv`` ([q; k; v], k and v with fewer rows
    under grouped-query attention); appends (q rows, k rows) to ``rows``; returns whether it
    has biases."""
    o = b + "attn."
    if f"{o}q_proj.weight" in t:
        q, k, v = (t.take(f"{o}{n}_proj.weight") for n in "qkv")
        if k.shape != v.shape:
            raise CheckpointError(f"{t.source.name}: {o}k_proj and v_proj differ in shape.")
        rows += [int(q.shape[0]), int(k.shape[0])]
        out[f"{o}qkv.weight"] = fuse_qkv(q, k, v)
        qb, kb, vb = (t.maybe(f"{o}{n}_proj.bias") for n in "qkv")
        if qb is None and vb is None and kb is None:
            return False
        if qb is None or vb is None:
            raise CheckpointError(f"{t.source.name}: {o}q_proj and v_proj differ in bias.")
        out[f"{o}qkv.bias"] = fuse_qkv(qb, vb.new_zeros(vb.shape) if kb is None else kb, vb)
        return True
    out[f"{o}qkv.weight"] = t.take(f"{o}qkv.weight")
    rows += [int(out[f"{o}qkv.weight"].shape[0]) // 3] * 2  # as many k heads as q heads
    bias = t.maybe(f"{o}qkv.bias")
    if bias is not None:
        out[f"{o}qkv.bias"] = bias
        return True
    qb, vb = t.maybe(f"{o}q_bias"), t.maybe(f"{o}v_bias")
    if qb is None or vb is None:
        return False
    out[f"{o}qkv.bias"] = torch.cat([qb, torch.zeros_like(qb), vb])  # EVA: no k bias
    return True


def _take_mlp(t: Taker, b: str, out: dict[str, Tensor], rec: dict[str, Any]) -> str:
    """The block's MLP tensors into ``out``; the SwiGLU packing (ViTConfig.swiglu_packed)."""
    o = b + "mlp."
    packed = ""
    names = ["fc2", *(("norm",) if rec["mlp_norm"] else ())]
    if not rec["swiglu"]:
        names.append("fc1")
    elif f"{o}fc1_g.weight" in t:
        names += ["fc1_g", "fc1_x"]
    else:  # GluMlp: one fc1, gate and value halves (the gate first unless gate_last)
        for part in ("weight", "bias"):
            a, c = t.take(f"{o}fc1.{part}").chunk(2, dim=0)
            gate, value = (c, a) if rec["glu_gate_last"] else (a, c)
            out[f"{o}fc1_g.{part}"], out[f"{o}fc1_x.{part}"] = gate, value
        packed = "value_gate" if rec["glu_gate_last"] else "gate_value"
    for name in names:
        for part in ("weight", "bias"):
            out[f"{o}{name}.{part}"] = t.take(f"{o}{name}.{part}")
    return packed


def _meta_names(source: Source) -> list[str]:
    """Sapiens2's original names renamed to timm's in place (sapiens2_names); the note."""
    if not has_meta_names(source.state):
        return []
    try:
        rename_meta(source.state)
    except ValueError as exc:
        raise CheckpointError(f"{source.name}: {exc}; refused rather than guessed.") from exc
    return ["Sapiens2's original tensor names (attn.wq, ffn.w12, ln1, storage_tokens) read as "
            "timm's, as timm's own loading renames them"]  # fmt: skip


def convert(source: Source) -> Conversion:
    meta = _meta_names(source)
    name, args = _named(source)
    other_sizes = source.user.pop("arch", None) is not None and not _own_sizes(source, name)
    if name is None:
        name, rec, recognised = _recognised(source)
    else:
        rec, recognised = _settings(source, name, args), f"architecture {name} as timm defines it"
    _check_shown(source, name, rec)
    dim = int(source.state["patch_embed.proj.weight"].shape[0])  # the name's, with its sizes
    named_width = None if other_sizes else rec["attn_head_dim"] or dim // rec["heads"]
    named_kv = rec["kv_heads"]
    if other_sizes:  # the name's per-block kv heads are not theirs (maybe not their depth)
        rec = {k: v for k, v in rec.items() if k != "kv_heads"}
    if other_sizes and "heads" not in source.user:  # the name's head count is not theirs
        rec = {k: v for k, v in rec.items() if k not in ("heads", "attn_head_dim")}
    t = Taker(source, LOOKS_LIKE)
    out: dict[str, Tensor] = {}
    depth = check_depth(source, block_indices(t.state, r"blocks\.(\d+)\.norm1\.weight$"))
    out["patch_embed.proj.weight"] = patch = t.take("patch_embed.proj.weight")
    bias = t.maybe("patch_embed.proj.bias")
    out["patch_embed.proj.bias"] = bias if bias is not None else patch.new_zeros(patch.shape[0])
    D, C, p = int(patch.shape[0]), int(patch.shape[1]), int(patch.shape[-1])
    prefix = 0
    for key in ("cls_token", "reg_token"):
        token = t.maybe(key)
        if token is not None:
            out[key] = token
            prefix += int(token.shape[1])
    pos = t.maybe("pos_embed")
    if pos is not None:
        out["pos_embed"] = pos
    if rec["rope"] == "mixed":
        out["rope.freqs"] = t.take("rope.freqs")
    qkv_bias, packed, rows = True, "", []
    rms = rec["norm"] == "rmsnorm"
    for i in range(depth):
        b = f"blocks.{i}."
        out[f"{b}attn.proj.weight"] = t.take(f"{b}attn.proj.weight")
        out[f"{b}attn.proj.bias"] = t.take(f"{b}attn.proj.bias")
        norms = ("norm1", "norm2", *(("attn.norm",) if rec["attn_norm"] else ()),
                 *(("attn.q_norm", "attn.k_norm") if rec["qk_norm"] else ()))  # fmt: skip
        for n in norms:
            _take_norm(t, b + n, out, rms)
        qkv_bias = _take_attention(t, b, out, rows)
        packed = _take_mlp(t, b, out, rec)
        if rec["layer_scale"]:
            out[f"{b}ls1.gamma"] = t.take(f"{b}gamma_1")
            if rec["layer_scale_mlp"]:
                out[f"{b}ls2.gamma"] = t.take(f"{b}gamma_2")
    for norm in ("norm_pre", "norm", "fc_norm"):
        for part in ("weight",) if rms else ("weight", "bias"):
            tensor = t.maybe(f"{norm}.{part}")
            if tensor is not None:
                out[f"{norm}.{part}"] = tensor
    take_attention_pool(t, out)  # PE core's MAP head (its presence checked by _check_shown)
    head = t.maybe("head.weight")
    if head is not None:
        out["head.weight"] = head
        out["head.bias"] = t.take("head.bias")
    t.refuse_leftovers()
    if not qkv_bias:
        out = {k: v for k, v in out.items() if not k.endswith("attn.qkv.bias")}

    cfg = source.timm_config or {}
    pretrained = dict(cfg.get("pretrained_cfg") or {})
    image = _image_size(args, pretrained, pos, prefix, rec, p, name, source.timm_config is not None)
    width = _head_width(out, rows, named_width, source.user)
    heads_shown = _heads_shown(rows, width, D, rec) if width else {}
    required: dict[str, Any] = {}
    if other_sizes and "heads" not in heads_shown:
        required["heads"] = example_heads(D)
    if image is None:  # rotary positions and no table: the trained size is not in the file
        image = _name_size(name)
        if "image_size" not in source.user:
            required["image_size"] = list(image)
    hidden = int(out["blocks.0.mlp.fc2.weight"].shape[1])
    inferred: dict[str, Any] = {k: rec[k] for k in CONFIG_KEYS if k in rec}
    inferred.update(heads_shown)
    notes_pool = _head_norm(source, rec, inferred, "fc_norm.weight" in out, "cls_token" in out)
    inferred.update(
        image_size=image, patch_size=p, in_channels=C, num_classes=0 if head is None
        else int(head.shape[0]), dim=D, depth=depth, mlp_hidden_dim=hidden, qkv_bias=qkv_bias,
        layer_scale_init=1.0 if rec["layer_scale"] else None,
        class_token=rec["class_token"], num_register_tokens=prefix - int(rec["class_token"]),
        pos_embed=rec["pos_embed"], activation="gelu", pos_embed_interp=rec["pos_embed_interp"],
    )  # fmt: skip
    if packed:
        inferred["swiglu_packed"] = packed
    pool_hidden = int(out["pool.fc1.weight"].shape[0]) if "pool.fc1.weight" in out else hidden
    if pool_hidden != hidden:
        inferred["pool_hidden_dim"] = pool_hidden
    if "image_size" in required:
        inferred.pop("image_size")
    prep, notes = timm_preprocessing(pretrained, TIMM_VIT_DEFAULTS)
    notes[0:0] = meta
    if "kv_heads" in heads_shown and heads_shown["kv_heads"] != rec.get("kv_heads"):
        notes.append(f"key/value heads per block read from the tensors: {heads_shown['kv_heads']}")
    notes.insert(0, recognised)
    notes[1:1] = notes_pool
    conversion = finish(
        source,
        family="timm-eva",
        looks_like=LOOKS_LIKE,
        inferred=inferred,
        required=required,
        state=out,
        class_names=None,
        preprocessing=prep,
        notes=notes,
        imagenet_if_1000=True,
    )
    config = conversion.config
    ref_args = dict(args)
    ref_args.update(
        img_size=tuple(config.image_size), num_classes=config.num_classes, patch_size=p,
        embed_dim=D, depth=depth, num_heads=config.heads, mlp_ratio=(hidden + 0.5) / D,
    )  # fmt: skip
    if C != 3:
        ref_args["in_chans"] = C
    ref_args.update(_attention_args(config, rec))
    words = [] if config.kv_heads == named_kv else [_kv_words(config.kv_heads, config.heads)]
    if config.fc_norm != bool(rec.get("fc_norm")) or config.global_pool != rec.get("global_pool"):
        ref_args.update(use_fc_norm=config.fc_norm, global_pool=config.global_pool)
        pool = "mean pooling" if config.global_pool == "avg" else "CLS pooling"
        words.append(pool + ("" if config.fc_norm else ", no fc_norm"))
    if config.global_pool == "map":  # the pool's own heads and MLP width, as opened
        ref_args.update(attn_pool_num_heads=config.pool_heads or config.heads,
                        attn_pool_mlp_ratio=(pool_hidden + 0.5) / D)  # fmt: skip
    how = META_LIBRARY_MODEL if meta else LIBRARY_MODEL
    conversion.reference = Reference("timm", name, ref_args, ", ".join(words), how=how)
    return conversion


def _head_width(
    out: dict[str, Tensor], rows: list[int], named: int | None, user: dict[str, Any]
) -> int | None:
    """Each head's width: a qk-norm's weight shows it; else the named architecture's (its own
    sizes), else the heads given by the user over q's rows; None when nothing says."""
    norm = out.get("blocks.0.attn.q_norm.weight")
    if norm is not None:
        return int(norm.shape[0])
    if named is not None:
        return named
    heads = user.get("heads")
    if isinstance(heads, int) and heads > 0 and rows and rows[0] % heads == 0:
        return rows[0] // heads
    return None


def _heads_shown(rows: list[int], width: int, D: int, rec: dict[str, Any]) -> dict[str, Any]:
    """The heads and each block's key/value heads that q's and k's rows give at head width
    ``width`` (``rows``: q rows, k rows of each block); kv_heads None when every block has
    as many as heads."""
    q_rows, k_rows = rows[0::2], rows[1::2]
    if any(r % width for r in rows) or len(set(q_rows)) != 1:
        return {}  # not whole heads: the model's build says which tensor
    heads = q_rows[0] // width
    kv = tuple(r // width for r in k_rows)
    shown: dict[str, Any] = {"kv_heads": kv if any(h != heads for h in kv) else None}
    if rec.get("qk_norm"):  # the head count itself shown by the qk-norm's width
        shown.update(heads=heads, attn_head_dim=None if heads * width == D else width)
    return shown


def _kv_words(kv_heads: tuple[int, ...] | None, heads: int) -> str:
    """Each block's key/value heads in runs: "key/value heads 4, 2 × 2, 4"."""
    runs: list[list[int]] = []
    for h in kv_heads or (heads,):
        if runs and runs[-1][0] == h:
            runs[-1][1] += 1
        else:
            runs.append([h, 1])
    if kv_heads is None:
        return f"{heads} key/value heads in every block"
    return "key/value heads " + ", ".join(f"{h} × {n}" if n > 1 else f"{h}" for h, n in runs)


def _attention_args(config: Any, rec: dict[str, Any]) -> dict[str, Any]:
    """timm's Eva keywords for the attention and LayerScale as vitviz reads them (DESIGN §4:
    like with like): qk-norm, each block's key/value heads (the rotary attention's), and
    LayerScale on the attention branch only."""
    args: dict[str, Any] = {"qk_norm": config.qk_norm}
    if rec["attn_kind"] == "AttentionRope":
        args["num_kv_heads"] = tuple(config.block_kv_heads(i) for i in range(config.depth))
    if config.layer_scale_init is not None:
        args["attn_only_layer_scale"] = not config.layer_scale_mlp
    return args


def _head_norm(
    source: Source, rec: dict[str, Any], inferred: dict[str, Any], fc_norm: bool, cls: bool
) -> list[str]:
    """The head's norm as the tensors show it (a fine-tune may move timm's fc_norm to the final
    norm, or back) and the pooling timm ties to it when the name's no longer fits; the note."""
    if bool(rec.get("fc_norm")) == fc_norm or rec.get("global_pool") == "map":
        return []
    inferred.update(fc_norm=fc_norm, final_norm=True)
    if "global_pool" in source.user:
        return []
    pool = "avg" if fc_norm or not cls else "token"
    inferred["global_pool"] = pool
    why = "fc_norm is present" if fc_norm else "the final norm is where fc_norm was"
    words = "mean pooling" if pool == "avg" else "CLS pooling"
    return [f'assumed {words}: {why}, which timm pairs with it (if not, give "global_pool")']


def _name_size(name: str) -> tuple[int, int]:
    try:
        embed = build_meta(name, {}).patch_embed
        return tuple(int(s) for s in embed.img_size)  # type: ignore[return-value]
    except Exception:  # noqa: BLE001 - checked when the settings were read
        return 224, 224


def _image_size(
    args: dict[str, Any],
    pretrained: dict[str, Any],
    pos: Tensor | None,
    prefix: int,
    rec: dict[str, Any],
    p: int,
    name: str,
    folder: bool,
) -> tuple[int, int] | None:
    """The trained input size: the position table's grid, else the folder's; None when the
    file doesn't say (a rotary ViT's bare weights: asked for, the name's size offered)."""
    if pos is not None:
        n = int(pos.shape[1]) - (0 if rec["no_embed_class"] else prefix)
        grid = grid_from_table(n)
        if grid is not None:
            return grid[0] * p, grid[1] * p
    if args.get("img_size") is not None:
        size = args["img_size"]
        return (size, size) if isinstance(size, int) else (int(size[0]), int(size[1]))
    size = pretrained.get("input_size")
    if isinstance(size, (list, tuple)) and len(size) == 3:
        return int(size[1]), int(size[2])
    return _name_size(name) if folder else None


FAMILY = Family(
    "timm-eva",
    detect,
    convert,
    info=FamilyInfo(
        label="timm EVA, EVA-02 and rotary ViTs",
        names="eva_*, eva02_*, vit_*_rope_*, vit_*_dinov3*, vit_*_sapiens2, vit_pe_spatial_*, "
        "vit_pe_core_*",
        forms="state dict (.pth, .safetensors) with its architecture; timm folder",
        parts=(
            "attention with rotary positions on the patches' q and k (EVA-02's axial RoPE, "
            "RoPE-Mixed, DINOv3's)",
            "q and v biases (or q, k and v)",
            "qk-norm",
            "grouped-query attention with each block's key/value heads (Sapiens2)",
            "pre-norm blocks (LayerNorm or RMSNorm)",
            "SwiGLU or GELU MLP",
            "sub-LN norms inside the attention and the MLP",
            "LayerScale (on both branches or the attention's only)",
            "learnt position table or none",
            "CLS token, registers",
            "CLS or mean pooling through fc_norm",
            "an attention-pool head (MAP) over every token, with its own heads (PE core)",
            "Conv2d patch embedding",
        ),
    ),
)
