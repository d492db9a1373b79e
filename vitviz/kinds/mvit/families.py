"""timm's MViTv2 (``mvitv2_tiny``, ``_small``, ``_base``, ``_large`` and the ``_cls`` forms
``mvitv2_small_cls``, ``_base_cls``, ``_large_cls``, ``_huge_cls``, the in21k checkpoints
among them): bare state dicts (.pth, .safetensors) and timm's folders (config.json +
model.safetensors, ``save_for_hf``).

Keys (vitviz's network uses timm's names): ``patch_embed.proj``, ``cls_token``, ``pos_embed``,
``stages.{s}.blocks.{j}.{norm1, shortcut_proj_attn, attn.{qkv, proj, pool_q, norm_q, pool_k,
norm_k, pool_v, norm_v, rel_pos_h, rel_pos_w}, norm2, shortcut_proj_mlp, mlp.fc1, mlp.fc2}``,
``norm``, ``head.fc``. The weights say the depths, widths, heads (a head's pooling conv is one
head's channels), where widths change (``expand_attn``), the CLS token, the pooling kernel, the
stem's kernel, the MLP ratio, the classes and (by the first block's relative position table)
the image size. They don't say the pooling strides, the stem's stride and padding, residual
pooling or the norms' eps: every timm ``mvitv2_*`` has the same ones (``SHARED``), which a bare
file is read with (noted); a folder's architecture is built by timm and must agree.

timm's other MViTv2 settings, which no timm name uses, are refused by name: pooling first
(``pool_first``: separate q, k, v Linears), max or average pooling (no pooling weights).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from vitviz.checkpoints.errors import CheckpointError
from vitviz.checkpoints.families.base import Conversion, Family, FamilyInfo, Source
from vitviz.checkpoints.families.common import (
    KIND_EXTRAS,
    aligned_state,
    read_softmaxes,
    timm_crop,
)
from vitviz.checkpoints.families.reference import LibraryReference
from vitviz.checkpoints.families.timm_library import build_timm, file_state
from vitviz.checkpoints.library_check import Reference
from vitviz.kinds.mvit.config import MViTConfig
from vitviz.kinds.numbered_blocks import numbered_stages
from vitviz.kinds.timm_family import TimmKind, finish_timm_kind, timm_name

LOOKS_LIKE = "a timm MViTv2"
_BLOCK = re.compile(r"stages\.(\d+)\.blocks\.(\d+)\.norm1\.weight$")
_POOLED = re.compile(r"stages\.\d+\.blocks\.\d+\.attn\.(pool_[qkv]\.weight|rel_pos_h)$")
# timm's names: (depths, first width, first heads, expand_attn, CLS token)
KNOWN: dict[str, tuple[tuple[int, ...], int, int, bool, bool]] = {
    "mvitv2_tiny": ((1, 2, 5, 2), 96, 1, True, False),
    "mvitv2_small": ((1, 2, 11, 2), 96, 1, True, False),
    "mvitv2_base": ((2, 3, 16, 3), 96, 1, True, False),
    "mvitv2_large": ((2, 6, 36, 4), 144, 2, False, False),
    "mvitv2_small_cls": ((1, 2, 11, 2), 96, 1, True, True),
    "mvitv2_base_cls": ((2, 3, 16, 3), 96, 1, True, True),
    "mvitv2_large_cls": ((2, 6, 36, 4), 144, 2, True, True),
    "mvitv2_huge_cls": ((4, 8, 60, 8), 192, 3, True, True),
}
# what every timm mvitv2_* has and the weights don't say (timm's MultiScaleVitCfg defaults)
SHARED: dict[str, Any] = dict(
    stride_q=((1, 1), (2, 2), (2, 2), (2, 2)),
    stride_kv_adaptive=(4, 4),
    patch_size=4,
    patch_padding=(3, 3),
    residual_pooling=True,
    norm_eps=1e-6,
)
_DEFAULTS = timm_crop(0.9)
EXTRAS = KIND_EXTRAS


def adaptive_kv_strides(stride_q: tuple[tuple[int, int], ...], start: tuple[int, int]) -> tuple:
    """timm's key/value strides per stage: ``start`` divided by each query stride on the way
    (where both its sides exceed 1), never below 1."""
    kv, out = list(start), []
    for sq in stride_q:
        if min(sq) > 1:
            kv = [max(kv[d] // sq[d], 1) for d in range(2)]
        out.append(tuple(kv))
    return tuple(out)


def detect(source: Source) -> bool:
    s = source.state
    return "patch_embed.proj.weight" in s and any(_POOLED.match(k) for k in s)


def _fail(source: Source, what: str) -> CheckpointError:
    return CheckpointError(f"{source.name} looks like {LOOKS_LIKE}, but {what}.")


def _blocks(source: Source) -> list[list[int]]:
    """Block indices per stage, checked to be numbered 0..n-1."""
    return list(numbered_stages(source.state, _BLOCK, partial(_fail, source), some=True).values())


def _tensor(source: Source, key: str) -> Tensor:
    t = source.state.get(key)
    if t is None:
        raise _fail(source, f"it lacks {key}")
    return t


def _shape(source: Source) -> dict[str, Any]:
    """What the weights say (see the module's docstring)."""
    s = source.state
    if any(re.search(r"\.attn\.q\.weight$", k) for k in s):
        raise CheckpointError(
            f"{source.name}: this is timm's MViTv2 with pool_first (q, k and v Linears after "
            "the pooling), which vitviz does not model (refused rather than shown wrong)."
        )
    stages = _blocks(source)
    first = [f"stages.{i}.blocks.0" for i in range(len(stages))]
    for p in first:
        if f"{p}.attn.pool_k.weight" not in s:
            raise CheckpointError(
                f"{source.name}: this is timm's MViTv2 with max or average pooling (no pooling "
                "convs), which vitviz does not model (refused rather than shown wrong)."
            )
    att = [int(_tensor(source, f"{p}.norm2.weight").shape[0]) for p in first]
    head_dims = [int(_tensor(source, f"{p}.attn.pool_k.weight").shape[0]) for p in first]
    if any(a % d for a, d in zip(att, head_dims, strict=True)):
        raise _fail(source, f"its widths {att} are no multiples of its heads' pooling {head_dims}")
    hidden = int(_tensor(source, "stages.0.blocks.0.mlp.fc1.weight").shape[0])
    stem = _tensor(source, "patch_embed.proj.weight")
    if stem.ndim != 4:
        raise _fail(source, f"its stem weight is {tuple(stem.shape)}, not a Conv2d's")
    rel = s.get("stages.0.blocks.0.attn.rel_pos_h")
    head = s.get("head.fc.weight")
    keys = list(s)
    return dict(
        depths=tuple(len(b) for b in stages),
        dims=tuple(att),
        heads=tuple(a // d for a, d in zip(att, head_dims, strict=True)),
        mlp_ratio=hidden / att[0],
        expand_attn=not any(".shortcut_proj_mlp." in k for k in keys),
        use_cls_token="cls_token" in s,
        use_abs_pos="pos_embed" in s,
        rel_pos=rel is not None,
        qkv_bias="stages.0.blocks.0.attn.qkv.bias" in s,
        kernel_qkv=tuple(
            int(v) for v in _tensor(source, f"{first[0]}.attn.pool_k.weight").shape[-2:]
        ),
        patch_kernel=tuple(int(v) for v in stem.shape[-2:]),
        in_channels=int(stem.shape[1]),
        num_classes=int(head.shape[0]) if head is not None else 0,
        table=None if rel is None else int(rel.shape[0]),
    )


def recognised(shape: Mapping[str, Any]) -> str | None:
    """The timm name whose tensors these are (depths, widths, heads, expand_attn, CLS)."""
    for name, (depths, dim, heads, expand, cls) in KNOWN.items():
        n = len(depths)
        dims = tuple(dim * 2**i for i in range(n))
        if (depths, dims, tuple(heads * 2**i for i in range(n)), expand, cls) == (
            shape["depths"], shape["dims"], shape["heads"], shape["expand_attn"],
            shape["use_cls_token"],
        ):  # fmt: skip
            return name
    return None


def _image_size(shape: Mapping[str, Any], args: Mapping[str, Any], pretrained: Mapping) -> int:
    """The image side: the first block's relative position table says its grid (2g - 1 rows),
    else the folder's img_size or input size, else 224."""
    if shape["table"] is not None:
        return (shape["table"] + 1) // 2 * SHARED["patch_size"]
    size = args.get("img_size") or (pretrained.get("input_size") or [3, 224])[-1]
    return int(size[0] if isinstance(size, list | tuple) else size)


def stage_blocks(model: nn.Module) -> list[nn.Module]:
    """timm's MultiScaleVit's blocks in order."""
    return [b for stage in model.stages for b in stage.blocks]


def read_mvit(model: nn.Module, x: Tensor) -> tuple[Tensor, list[Tensor] | None]:
    """timm's logits and each block's probabilities (B, heads, P + Nq, P + Nk): in timm's
    MultiScaleVit, its softmaxes (its only ones; its attention has no dropout to hook)."""
    return read_softmaxes(model, x, len(stage_blocks(model)))


def timm_cfg_args(config: MViTConfig) -> dict[str, Any]:
    """timm's MultiScaleVitCfg fields of ``config``."""
    return dict(
        depths=list(config.depths),
        embed_dim=list(config.dims),
        num_heads=list(config.heads),
        mlp_ratio=config.mlp_ratio,
        expand_attn=config.expand_attn,
        qkv_bias=config.qkv_bias,
        use_cls_token=config.use_cls_token,
        use_abs_pos=config.use_abs_pos,
        residual_pooling=config.residual_pooling,
        kernel_qkv=list(config.kernel_qkv),
        stride_q=[list(s) for s in config.stride_q],
        stride_kv=[list(s) for s in config.stride_kv],
        patch_kernel=list(config.patch_kernel),
        patch_stride=[config.patch_size] * 2,
        patch_padding=list(config.patch_padding),
        rel_pos_type="spatial" if config.rel_pos else "none",
        norm_eps=config.norm_eps,
    )


def build_mvit(arch: str, model_args: Mapping[str, Any], cfg: Any, weights: Path) -> nn.Module:
    """timm's ``arch`` (``build_timm``), or, unnamed, timm's MultiScaleVit of the MultiScaleVitCfg
    in ``model_args["cfg"]``, holding the file's tensors."""
    if arch:
        return build_timm(arch, model_args, cfg, weights)
    from timm.models.mvitv2 import MultiScaleVit, MultiScaleVitCfg

    fields = {
        k: tuple(tuple(x) if isinstance(x, list) else x for x in v) if isinstance(v, list) else v
        for k, v in model_args["cfg"].items()
    }
    with torch.device("meta"):
        model = MultiScaleVit(
            MultiScaleVitCfg(**fields),
            img_size=tuple(cfg.image_size),
            in_chans=cfg.in_channels,
            num_classes=cfg.num_classes,
            global_pool=cfg.global_pool,
        )
    state = aligned_state(file_state(weights))
    model.load_state_dict(state, strict=True, assign=True)
    return model.eval()


LIBRARY_MODEL = LibraryReference(build_mvit, read_mvit)


# timm's MultiScaleVitCfg fields the weights don't say, and vitviz's MViTConfig key of each
# (None: vitviz computes only the value in VITVIZ_ONLY)
UNSEEN: dict[str, str | None] = {
    "stride_q": "stride_q",
    "stride_kv": "stride_kv",
    "patch_stride": "patch_size",
    "patch_padding": "patch_padding",
    "residual_pooling": "residual_pooling",
    "norm_eps": "norm_eps",
    "mode": None,
    "pool_first": None,
    "act_layer": None,
    "norm_layer": None,
}
VITVIZ_ONLY = {"mode": "conv", "pool_first": False, "act_layer": "gelu", "norm_layer": "layernorm"}


def _nested(value: Any) -> Any:
    """Lists and tuples as tuples, all the way down (timm's config and vitviz's alike)."""
    return tuple(_nested(v) for v in value) if isinstance(value, list | tuple) else value


def name_differences(name: str, config: MViTConfig, given: set[str]) -> list[str]:
    """The settings of timm's ``name`` (its ``model_cfgs`` entry) that the weights don't say and
    vitviz's reading has otherwise ("stride_q ((1, 1), (2, 2)) (vitviz read ((1, 1), (1, 1)))"),
    the per-stage ones over the file's stages; those in ``given`` (the user's) are the user's
    to say. [] when timm is not importable (the check's note says so)."""
    try:
        from timm.models.mvitv2 import model_cfgs
    except ImportError:
        return []
    theirs = model_cfgs.get(name.split(".")[0])
    if theirs is None:
        return []
    ours = timm_cfg_args(config)
    stages = len(config.depths)
    found = []
    for field, key in UNSEEN.items():
        if key is not None and key in given:
            continue
        want = _nested(getattr(theirs, field, None))
        have = _nested(VITVIZ_ONLY[field] if key is None else ours[field])
        if field in ("stride_q", "stride_kv") and isinstance(want, tuple):
            want = want[:stages]
        if want != have:
            found.append(f"{field} {want} (vitviz read {have})")
    return found


def _name(source: Source, shape: dict[str, Any]) -> tuple[str | None, bool, list[str]]:
    """(the timm name, whether the user gave it, notes)."""
    name, user_given, notes = timm_name(source, shape, recognised, KNOWN, "MViTv2")
    if name is None:
        notes.append(
            "read with the pooling strides, stem and residual pooling every timm mvitv2_* has "
            "(its tensors are none of timm's names)"
        )
    return name, user_given, notes


TIMM = TimmKind("mvit", MViTConfig, ("an MViTv2", "MViTv2"), "timm-mvitv2", _DEFAULTS)


def convert(source: Source) -> Conversion:
    cfg = source.timm_config or {}
    args: dict[str, Any] = dict(cfg.get("model_args") or {})
    pretrained: dict[str, Any] = dict(cfg.get("pretrained_cfg") or {})
    shape = _shape(source)
    given = set(source.user)
    name, user_arch, notes = _name(source, shape)
    S = len(shape["depths"])
    if len(SHARED["stride_q"]) < S:
        raise _fail(source, f"it has {S} stages, and timm's MViTv2 strides are given for 4")
    stride_q = SHARED["stride_q"][:S]
    inferred = {k: v for k, v in shape.items() if k != "table"}
    size = _image_size(shape, {} if user_arch else args, pretrained)
    inferred.update(
        image_size=(size, size),
        stride_q=stride_q,
        stride_kv=adaptive_kv_strides(stride_q, SHARED["stride_kv_adaptive"]),
        patch_size=SHARED["patch_size"],
        patch_padding=SHARED["patch_padding"],
        residual_pooling=SHARED["residual_pooling"],
        norm_eps=SHARED["norm_eps"],
        global_pool=str(args.get("global_pool") or ("token" if shape["use_cls_token"] else "avg")),
    )
    conversion = finish_timm_kind(source, TIMM, inferred, shape["num_classes"], notes)
    config = conversion.config
    differ = name_differences(name, config, given) if isinstance(name, str) else []
    if differ:  # the name's settings the tensors can't show are not the ones read
        raise CheckpointError(
            f"{source.name}: timm's {name} has {'; '.join(differ)}, which vitviz's reading of "
            "an MViTv2 does not follow (refused rather than shown wrong)."
        )
    # timm's MultiScaleVit built with what was read: the name's model config holds its own
    # sizes and no keyword changes them, so a named file's is built from its reading too (its
    # settings the tensors can't show compared above), like with like (DESIGN §4)
    words = (
        f"widths {', '.join(map(str, config.dims))}, depths "
        f"{', '.join(map(str, config.depths))}, heads {', '.join(map(str, config.heads))}"
    )
    conversion.reference = Reference(
        "timm", "", {"cfg": timm_cfg_args(config)}, words,
        shown_as=name if isinstance(name, str) else "MultiScaleVit",
        how=LIBRARY_MODEL,
    )  # fmt: skip
    return conversion


def mvit_parts(config: MViTConfig) -> tuple[str, ...]:
    """An MViTv2's parts in words."""
    k = "×".join(map(str, config.kernel_qkv))
    head = "the CLS token" if config.global_pool == "token" else "the mean of the patch tokens"
    widths = "the attention" if config.expand_attn else "the MLP"
    return (
        f"Conv2d stem (kernel {config.patch_kernel[0]}, stride {config.patch_size})"
        + (", a CLS token through every block" if config.use_cls_token else ""),
        f"pooled attention: q, k, v pooled per head by depthwise {k} convs and a LayerNorm "
        "(queries by 2 at a stage's first block, keys and values by the stage's stride)",
        "decomposed relative position bias on the logits" if config.rel_pos else "no position bias",
        "residual pooling (the pooled queries added to each head's output)"
        if config.residual_pooling
        else "no residual pooling",
        f"widths change at a stage's first block in {widths}; the shortcut max-pooled and "
        "projected",
        f"final LayerNorm; the head on {head}",
    )


FAMILY = Family(
    "timm-mvitv2",
    detect,
    convert,
    info=FamilyInfo(
        label="timm MViTv2",
        names="mvitv2_tiny, _small, _base, _large and mvitv2_small_cls, _base_cls, _large_cls, "
        "_huge_cls",
        forms="state dict (.pth, .safetensors); timm folder",
        parts=(
            "overlapping Conv2d stem, optional CLS token",
            "pooled attention (depthwise conv + LayerNorm on q, k, v per head)",
            "decomposed relative position bias, residual pooling",
            "head on the final-normed mean of the patches (or the CLS token)",
        ),
    ),
)
