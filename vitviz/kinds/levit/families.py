"""timm's LeViT (``levit_128s``, ``levit_128``, ``levit_192``, ``levit_256``, ``levit_384``, the
``*_s8``, ``levit_512``, ``*d`` experiments, and every ``levit_conv_*`` twin): bare state dicts
(.pth, .safetensors) and timm's folders (config.json + model.safetensors, ``save_for_hf``).

Keys (vitviz's network uses timm's names): ``stem.conv{i}.{linear, bn}``,
``stages.{s}.downsample.attn_downsample.{kv, q.ln, proj.ln, attention_biases}`` and
``stages.{s}.downsample.mlp.{ln1, ln2}`` (s > 0), ``stages.{s}.blocks.{j}.attn.{qkv, proj.ln,
attention_biases}`` and ``.mlp.{ln1, ln2}``, ``head.{bn, linear}``, ``head_dist``. A
``levit_conv_*`` file holds the same tensors as 1×1 convs (vitviz's network then computes in
that layout, as timm's does).
The weights say the widths, depths, heads (the bias tables' rows), key and value widths, MLP
widths, the stem's stride (its convs), the first grid (the bias table's columns: a square),
the distillation head and the classes. They don't say the activation (Hardswish, or SiLU in
timm's ``*_s8``, ``levit_512`` and ``*d``): it comes from timm's own model of the architecture's
name (config.json's ``architecture``, ``--arch``), else a bare file whose shapes are one of
timm's names is recognised as it (and noted), else ``activation`` in its settings.
"""

from __future__ import annotations

import math
import re
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn

from vitviz.checkpoints.errors import CheckpointError, MissingSettingsError
from vitviz.checkpoints.families.base import Conversion, Family, FamilyInfo, Source
from vitviz.checkpoints.families.common import (
    KIND_EXTRAS,
    aligned_state,
    finish_kind,
    timm_crop,
)
from vitviz.checkpoints.families.timm_library import timm_reference
from vitviz.checkpoints.families.timm_names import timm_version
from vitviz.checkpoints.labels import names_from_timm
from vitviz.checkpoints.library_check import Reference
from vitviz.checkpoints.preprocessing import timm_preprocessing
from vitviz.core.optional import install_to_open
from vitviz.kinds.levit.config import DOWN_MLP_RATIO, DOWN_VALUE_RATIO, LeViTConfig
from vitviz.kinds.numbered_blocks import numbered_stages

LOOKS_LIKE = "a timm LeViT"
_BLOCK = re.compile(r"stages\.(\d+)\.blocks\.(\d+)\.attn\.attention_biases$")
_STEM = re.compile(r"stem\.conv(\d+)\.linear\.weight$")
# timm's LeViT names: (widths, depths, heads, key_dim, stem stride, activation)
KNOWN: dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], int, int, str]] = {
    "levit_128s": ((128, 256, 384), (2, 3, 4), (4, 6, 8), 16, 16, "hard_swish"),
    "levit_128": ((128, 256, 384), (4, 4, 4), (4, 8, 12), 16, 16, "hard_swish"),
    "levit_192": ((192, 288, 384), (4, 4, 4), (3, 5, 6), 32, 16, "hard_swish"),
    "levit_256": ((256, 384, 512), (4, 4, 4), (4, 6, 8), 32, 16, "hard_swish"),
    "levit_384": ((384, 512, 768), (4, 4, 4), (6, 9, 12), 32, 16, "hard_swish"),
    "levit_384_s8": ((384, 512, 768), (4, 4, 4), (6, 9, 12), 32, 8, "silu"),
    "levit_512_s8": ((512, 640, 896), (4, 4, 4), (8, 10, 14), 64, 8, "silu"),
    "levit_512": ((512, 768, 1024), (4, 4, 4), (8, 12, 16), 64, 16, "silu"),
    "levit_256d": ((256, 384, 512), (4, 8, 6), (4, 6, 8), 32, 16, "silu"),
    "levit_512d": ((512, 640, 768), (4, 8, 6), (8, 10, 12), 64, 16, "silu"),
}
_DEFAULTS = timm_crop(0.9)
EXTRAS = KIND_EXTRAS


# -- timm's model as the library check reads it -----------------------------------------------
def library_layers(model: nn.Module) -> list[nn.Module]:
    """timm's LeViT's attention modules in vitviz's order: a stage's ``attn_downsample``, then
    its blocks' ``attn``."""
    out = []
    for stage in model.stages:
        down = getattr(stage.downsample, "attn_downsample", None)
        if down is not None:
            out.append(down)
        out += [b.attn for b in stage.blocks]
    return out


def _library_qkv(m: nn.Module, x: Tensor) -> tuple[Tensor, Tensor, Tensor, tuple[int, ...]]:
    """q (B, h, N_q, d), k (B, h, N_k, d), v (B, h, N_k, e) of timm's attention ``m`` on its
    input x, from its own modules, in its Linear or conv layout; and the output's shape."""
    h, kd, vd = m.num_heads, m.key_dim, m.val_dim
    down = hasattr(m, "kv")
    if m.use_conv:
        B, _, H, W = x.shape
        if down:
            k, v = m.kv(x).view(B, h, -1, H * W).split([kd, vd], dim=2)
            q = m.q(x).view(B, h, kd, -1)
            shape: tuple[int, ...] = (B, h * vd, (H - 1) // m.stride + 1, (W - 1) // m.stride + 1)
        else:
            q, k, v = m.qkv(x).view(B, h, -1, H * W).split([kd, kd, vd], dim=2)
            shape = (B, h * vd, H, W)
        return q.transpose(-2, -1), k.transpose(-2, -1), v.transpose(-2, -1), shape
    B, N, _ = x.shape
    if down:
        k, v = m.kv(x).view(B, N, h, -1).split([kd, vd], dim=3)
        q = m.q(x).view(B, -1, h, kd)
    else:
        q, k, v = m.qkv(x).view(B, N, h, -1).split([kd, kd, vd], dim=3)
    q, k, v = (t.permute(0, 2, 1, 3) for t in (q, k, v))
    return q, k, v, (B, q.shape[2], h * vd)


def library_probabilities(layer: nn.Module, out: list[Tensor], keep_graph: bool = False) -> Any:
    """A hook on timm's attention ``layer`` appending softmax(q·kᵀ·scale + bias) (B, heads,
    N_q, N_k), computed from its own q, k and its bias table as its forward does (timm's
    softmax is not a module a hook could read). ``keep_graph``: the layer's output is computed
    from that very tensor (the same values), so gradients reach it."""

    def hook(m: nn.Module, args: tuple[Any, ...], output: Tensor) -> Tensor | None:
        x = args[0]
        q, k, v, shape = _library_qkv(m, x)
        attn = ((q @ k.transpose(-2, -1)) * m.scale + m.get_attention_biases(x.device)).softmax(-1)
        out.append(attn)
        if not keep_graph:
            return None
        heads = attn @ v  # (B, h, N_q, e)
        if m.use_conv:
            merged = heads.permute(0, 1, 3, 2).reshape(shape)
        else:
            merged = heads.transpose(1, 2).reshape(shape)
        return m.proj(merged)

    return layer.register_forward_hook(hook)


LIBRARY_MODEL = timm_reference(blocks=library_layers, probabilities=library_probabilities)


# -- reading a file --------------------------------------------------------------------------
def detect(source: Source) -> bool:
    s = source.state
    return "stem.conv1.linear.weight" in s and any(_BLOCK.match(k) for k in s)


def _fail(source: Source, what: str) -> CheckpointError:
    return CheckpointError(f"{source.name} looks like {LOOKS_LIKE}, but {what}.")


def _numbered(source: Source) -> dict[int, int]:
    """{stage: blocks}; CheckpointError unless stages and blocks are numbered 0..n-1."""
    found = numbered_stages(source.state, _BLOCK, partial(_fail, source))
    return {s: len(blocks) for s, blocks in found.items()}


def _get(source: Source, key: str, ndim: tuple[int, ...] = (2, 4)) -> Tensor:
    t = source.state.get(key)
    if t is None:
        raise _fail(source, f"it lacks {key}")
    if t.ndim not in ndim:
        raise _fail(source, f"its {key} is {tuple(t.shape)}")
    return t


def _shape(source: Source) -> dict[str, Any]:
    """What the weights say: stem, widths, depths, heads, key/value/MLP widths, grid, heads."""
    s = source.state
    depths = _numbered(source)
    S = len(depths)
    stems = sorted(int(m.group(1)) for k in s if (m := _STEM.match(k)))
    if stems not in ([1, 2, 3], [1, 2, 3, 4]):
        raise _fail(source, f"its stem has convs {stems}, not 3 or 4 (stride 8 or 16)")
    dims, heads, values, hidden, keys = [], [], [], [], []
    for st in range(S):
        p = f"stages.{st}.blocks.0"
        bias = _get(source, f"{p}.attn.attention_biases", (2,))
        proj = _get(source, f"{p}.attn.proj.ln.linear.weight")
        qkv = _get(source, f"{p}.attn.qkv.linear.weight")
        h = int(bias.shape[0])
        if proj.shape[1] % h:
            raise _fail(source, f"stage {st}'s values ({proj.shape[1]}) don't split into {h} heads")
        vd = int(proj.shape[1]) // h
        heads.append(h)
        dims.append(int(proj.shape[0]))
        values.append(vd)
        keys.append((int(qkv.shape[0]) // h - vd) / 2)
        hidden.append(int(_get(source, f"{p}.mlp.ln1.linear.weight").shape[0]))
    if len(set(keys)) != 1 or keys[0] != int(keys[0]) or keys[0] < 1:
        raise _fail(source, f"its key widths per stage {keys} are not one whole number")
    n0 = int(_get(source, "stages.0.blocks.0.attn.attention_biases", (2,)).shape[1])
    side = math.isqrt(n0)
    if side * side != n0:
        raise _fail(source, f"its first grid of {n0} tokens is not a square")
    head = s.get("head.linear.weight")
    qkv0 = _get(source, "stages.0.blocks.0.attn.qkv.linear.weight")
    return dict(
        depths=tuple(depths[i] for i in range(S)),
        dims=tuple(dims),
        heads=tuple(heads),
        key_dim=int(keys[0]),
        value_dims=tuple(values),
        mlp_hidden_dims=tuple(hidden),
        stem_stride=16 if len(stems) == 4 else 8,
        in_channels=int(_get(source, "stem.conv1.linear.weight", (4,)).shape[1]),
        grid=(side, side),
        conv=qkv0.ndim == 4,
        distilled="head_dist.linear.weight" in s or "head_dist.bn.weight" in s,
        num_classes=int(head.shape[0]) if head is not None else 0,
    )


def _check_timm_rules(source: Source, config: LeViTConfig) -> None:
    """The tensors timm's rules fix (a subsample's heads, values, MLP; each grid) are there as
    the config says: else refused as a layout vitviz can't express."""
    s = source.state
    grids = config.stage_grids()
    kd = config.key_dim
    for st in range(config.num_stages):
        for j in range(config.depths[st]):
            bias = s.get(f"stages.{st}.blocks.{j}.attn.attention_biases")
            want = (config.heads[st], grids[st][0] * grids[st][1])
            if bias is None or tuple(bias.shape) != want:
                raise _fail(source, f"block {st}.{j}'s bias table is not {want}")
        if st == 0:
            continue
        h, p = config.down_heads(st), f"stages.{st}.downsample"
        want_shapes = {
            f"{p}.attn_downsample.attention_biases": (h, grids[st - 1][0] * grids[st - 1][1]),
            f"{p}.attn_downsample.q.ln.linear.weight": (h * kd, config.dims[st - 1]),
            f"{p}.attn_downsample.kv.linear.weight": (
                h * (kd + DOWN_VALUE_RATIO * kd), config.dims[st - 1],
            ),
            f"{p}.mlp.ln1.linear.weight": (DOWN_MLP_RATIO * config.dims[st], config.dims[st]),
        }  # fmt: skip
        for key, shape in want_shapes.items():
            t = s.get(key)
            if t is None:
                raise _fail(source, f"it lacks {key}")
            if tuple(t.shape[:2]) != shape:
                raise CheckpointError(
                    f"{source.name}: vitviz's LeViT can't express {key} {tuple(t.shape)} "
                    f"(timm's subsample has {shape})."
                )


def recognised(shape: dict[str, Any]) -> str | None:
    """The timm name whose tensors these are (widths, depths, heads, key width, stem)."""
    for name, (dims, depths, heads, kd, stride, _act) in KNOWN.items():
        if (dims, depths, heads, kd, stride) == (
            shape["dims"], shape["depths"], shape["heads"], shape["key_dim"], shape["stem_stride"],
        ):  # fmt: skip
            return name.replace("levit_", "levit_conv_") if shape["conv"] else name
    return None


def _act_name(module: nn.Module) -> str | None:
    if isinstance(module, nn.Hardswish):
        return "hard_swish"
    if isinstance(module, nn.SiLU):
        return "silu"
    return None


def from_timm(source: Source, name: str, args: dict[str, Any]) -> dict[str, Any]:
    """The activation of timm's own ``name`` with ``args`` (built on the meta device)."""
    import timm

    kwargs = {k: v for k, v in args.items() if k not in ("pretrained", "img_size")}
    try:
        with torch.device("meta"):
            model = timm.create_model(name, pretrained=False, **kwargs)
    except Exception as exc:  # timm's own error: an unknown name, arguments it refuses
        raise CheckpointError(f"timm can't build {name} ({type(exc).__name__}: {exc})") from exc
    if type(model).__name__ not in ("Levit", "LevitDistilled"):
        raise CheckpointError(f"timm's {name} is a {type(model).__name__}, not a LeViT")
    stem_act = _act_name(model.stem.act1)
    attn_act = _act_name(library_layers(model)[0].proj.act)
    mlp_act = _act_name(model.stages[0].blocks[0].mlp.act)
    if stem_act is None or len({stem_act, attn_act, mlp_act}) != 1:
        raise CheckpointError(
            f"{source.name}: vitviz's LeViT can't express timm's {name} with these arguments "
            "(its activations are not one Hardswish or SiLU)."
        )
    return {"activation": stem_act}


def _settings(
    source: Source, shape: dict[str, Any], name: str | None, args: dict[str, Any]
) -> dict[str, Any]:
    """The activation from timm, its definitions, or the user's settings."""
    if name and timm_version() is not None:
        return from_timm(source, name, args)
    known = KNOWN.get(name.replace("levit_conv_", "levit_")) if name else None
    if name and not args and known is not None:
        return {"activation": known[5]}
    if name:
        raise CheckpointError(f"{source.name}: {install_to_open('timm', name)}.")
    if "activation" in source.user:
        return {}
    raise MissingSettingsError(
        f"{source.name} looks like {LOOKS_LIKE}, but its tensors are none of timm's levit_* "
        f"names and the weights don't say the activation. Give the timm name with --arch NAME, "
        f'or it in {source.sidecar_name}, e.g. {{"activation": "hard_swish"}} (or "silu").',
        {"activation": "hard_swish"},
    )


def _name(source: Source, shape: dict[str, Any]) -> tuple[str | None, bool, list[str]]:
    """(the timm name, whether the user gave it, notes): ``--arch``, the folder's
    ``architecture``, or (without the user's activation) the name the tensors are."""
    user_arch = source.user.pop("arch", None)
    name = user_arch or (source.timm_config or {}).get("architecture")
    notes: list[str] = []
    if name is None and "activation" not in source.user:
        name = recognised(shape)
        if name is not None:
            act = KNOWN[name.replace("levit_conv_", "levit_")][5]
            notes.append(
                f"recognised as timm's {name} from its tensors (activation {act} as timm "
                f"defines it; set activation in {source.sidecar_name} or --arch for another)"
            )
    return name, user_arch is not None, notes


def _library_args(config: LeViTConfig) -> dict[str, Any]:
    """timm's LeViT arguments of ``config``."""
    kd = config.key_dim
    return dict(
        embed_dim=list(config.dims),
        key_dim=kd,
        num_heads=list(config.heads),
        depth=list(config.depths),
        attn_ratio=[v / kd for v in config.value_dims],
        mlp_ratio=[h / d for h, d in zip(config.mlp_hidden_dims, config.dims, strict=True)],
        act_layer=config.activation,
        stem_type="s16" if config.stem_stride == 16 else "s8",
        distilled=config.distilled,
    )


def levit_conversion(
    source: Source,
    shape: dict[str, Any],
    settings: dict[str, Any],
    family: str,
    class_names: list[str] | None,
    preprocessing: dict[str, Any],
    notes: list[str],
) -> Conversion:
    """The conversion of ``source`` (its state under timm's names) whose weights say ``shape``
    (``_shape``) and whose activation ``settings`` give: the config, checked against timm's
    rules for the tensors it fixes."""
    inferred = {k: v for k, v in shape.items() if k != "grid"}
    inferred.update(settings)
    inferred["image_size"] = tuple(g * shape["stem_stride"] for g in shape["grid"])
    conversion = finish_kind(
        source,
        kind="levit",
        config_cls=LeViTConfig,
        words=("a LeViT", "its config fields", "LeViT"),
        extras=EXTRAS,
        family=family,
        inferred=inferred,
        state=aligned_state(source.state),
        class_names=class_names,
        preprocessing=preprocessing,
        notes=notes,
        imagenet_if_1000=True,
    )
    _check_timm_rules(source, conversion.config)
    return conversion


def convert(source: Source) -> Conversion:
    cfg = source.timm_config or {}
    args: dict[str, Any] = dict(cfg.get("model_args") or {})
    pretrained: dict[str, Any] = dict(cfg.get("pretrained_cfg") or {})
    shape = _shape(source)
    name, user_arch, notes = _name(source, shape)
    settings = _settings(source, shape, name, {} if user_arch else args)
    prep, prep_notes = timm_preprocessing(pretrained, _DEFAULTS)
    conversion = levit_conversion(
        source, shape, settings, "timm-levit", names_from_timm(cfg, shape["num_classes"]), prep,
        notes + prep_notes,
    )  # fmt: skip
    config = conversion.config
    words = (
        f"widths {', '.join(map(str, config.dims))}, depths "
        f"{', '.join(map(str, config.depths))}, heads {', '.join(map(str, config.heads))}"
    )
    if isinstance(name, str):  # timm's own model of that name, built as the file has it
        given = {**({} if user_arch else args), **_library_args(config)}
        conversion.reference = Reference("timm", name, given, words, how=LIBRARY_MODEL)
    else:  # the user's settings: timm's LeViT built with them
        arch = "levit_conv_128s" if config.conv else "levit_128s"
        conversion.reference = Reference(
            "timm", arch, _library_args(config), words, shown_as="Levit", how=LIBRARY_MODEL
        )
    return conversion


def levit_parts(config: LeViTConfig) -> tuple[str, ...]:
    """A LeViT's parts in words."""
    act = "Hardswish" if config.activation == "hard_swish" else "SiLU"
    head = (
        "the mean of two heads (BatchNorm, Linear) on the mean token (distilled)"
        if config.distilled
        else "a head (BatchNorm, Linear) on the mean token"
    )
    return (
        f"conv stem: {config.stem_convs} stride-2 3×3 convs with BatchNorm, {act} between",
        "attention with a learned bias per head and offset on the stage's grid; q, k, v and the "
        f"projection Linear + BatchNorm, {act} before the projection",
        f"MLP residual blocks (Linear + BatchNorm, {act}, Linear + BatchNorm)",
        "subsample attention between stages: queries on every other row and column, keys and "
        "values all of the previous stage's tokens (no residual), then an MLP",
        "no CLS token, no position embedding",
        head,
    )


FAMILY = Family(
    "timm-levit",
    detect,
    convert,
    info=FamilyInfo(
        label="timm LeViT",
        names="levit_128s, levit_128, levit_192, levit_256, levit_384, levit_384_s8, "
        "levit_512_s8, levit_512, levit_256d, levit_512d and their levit_conv_ twins",
        forms="state dict (.pth, .safetensors); timm folder",
        parts=(
            "conv stem with BatchNorm and Hardswish (SiLU in the experiments)",
            "attention with learned per-offset biases, Linear + BatchNorm layers",
            "subsample attention between stages (queries on a stride-2 grid)",
            "MLP residual blocks",
            "head on the mean token through a BatchNorm (distilled: the mean of two heads)",
        ),
    ),
)
