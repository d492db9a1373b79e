"""timm's hybrid ViTs (``vision_transformer_hybrid``: ``vit_*_r26_*``, ``vit_base_r50_s16_*``,
``vit_tiny_r_s16_p8_*``, ``vit_*_resnet26d/50d_*``), a bare state dict or timm's folder: a
convolutional backbone (``patch_embed.backbone.*``) before a Conv2d projection
(``patch_embed.proj``) to the tokens, then timm's ViT layout.

The backbone's kind, stages, widths and the projection's patch come from its tensors: timm's
ResNetV2 (``stem.conv``, ``stages.N.blocks.M``, or the stem alone: ``conv``, ``norm``) or its
ResNet-D features (``conv1.0``, ``layerN.M``). What the tensors don't show (SAME padding,
weight-standardisation and norm eps, GroupNorm groups; the ViT's heads) comes from the named or
recognised timm architecture; without one, timm's hybrid defaults are assumed and said so. Any
backbone tensor vitviz's stem would not hold, or one it lacks, refuses the checkpoint.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import torch
from torch import Tensor

from vitviz.blocks.stem_config import StemConfig
from vitviz.blocks.stems import make_backbone
from vitviz.checkpoints.errors import CheckpointError
from vitviz.checkpoints.families.base import Conversion, Family, FamilyInfo, Source
from vitviz.checkpoints.families.common import (
    Taker,
    aligned,
    block_indices,
    check_depth,
    example_heads,
    finish,
    grid_from_table,
    standard_heads,
)
from vitviz.checkpoints.families.timm_library import LIBRARY_MODEL
from vitviz.checkpoints.labels import names_from_timm
from vitviz.checkpoints.library_check import Reference
from vitviz.checkpoints.preprocessing import (
    TIMM_DEIT_DEFAULTS,
    TIMM_VIT_DEFAULTS,
)
from vitviz.kinds.timm_family import timm_preprocessing_noted
from vitviz.kinds.vit.families.timm import (
    _pos_layout,
    take_blocks,
    take_head,
    take_prefix_and_pos,
)
from vitviz.kinds.vit.families.timm_resolve import (
    Choice,
    applied,
    choose_architecture,
    how_to_name,
)

LOOKS_LIKE = "a timm hybrid ViT (a ResNet before the tokens)"
BACKBONE = "patch_embed.backbone."
_BLOCK = r"blocks\.(\d+)\.attn\.qkv\.weight$"


def detect(source: Source) -> bool:
    s = source.state
    return any(k.startswith(BACKBONE) for k in s) and any(re.match(_BLOCK, k) for k in s)


def _stages(keys: list[str], pattern: str, first: int = 0) -> list[int]:
    """Blocks per stage from keys like ``stages.0.blocks.2.conv1.weight`` (``pattern`` has the
    stage and block groups; stages numbered from ``first``), in order; [] when none."""
    found: dict[int, int] = {}
    for k in keys:
        m = re.match(pattern, k)
        if m:
            s, b = int(m.group(1)) - first, int(m.group(2))
            found[s] = max(found.get(s, 0), b + 1)
    if sorted(found) != list(range(len(found))):
        raise ValueError("the backbone's stages are not numbered from the first")
    return [found[i] for i in range(len(found))]


def read_stem(source: Source, backbone: dict[str, Tensor], proj: Tensor | None) -> StemConfig:
    """The backbone's kind, stages and widths from its tensors (names without the prefix);
    no ``proj``: MobileCLIP's stem, whose last conv makes the tokens."""
    keys = list(backbone)
    p = 0 if proj is None else int(proj.shape[-1])
    if "0.conv.weight" in backbone:  # timm's ConvStem: 0.conv, 0.bn, 1.conv, ...
        convs = [backbone[f"{i}.conv.weight"] for i in range(len(keys))
                 if f"{i}.conv.weight" in backbone]  # fmt: skip
        channels, kernels = [int(w.shape[0]) for w in convs], [int(w.shape[-1]) for w in convs]
        return StemConfig("convstem", (), channels[0], tuple(channels), p, kernels=tuple(kernels))
    if proj is None:
        raise CheckpointError(
            f"{source.name}: a hybrid stem without a patch projection (patch_embed.proj) "
            "other than MobileCLIP's is not a backbone vitviz models."
        )
    try:
        if "conv1.0.weight" in backbone:  # ResNet-D: layer1..layerS, block M
            layers = _stages(keys, r"layer(\d+)\.(\d+)\.conv1\.weight$", first=1)
            widths = [int(backbone[f"layer{i + 1}.0.conv3.weight"].shape[0])
                      for i in range(len(layers))]  # fmt: skip
            width = int(backbone["conv1.6.weight"].shape[0])
            return StemConfig("resnet_d", tuple(layers), width, tuple(widths), p)
        prefix = "stem." if "stem.conv.weight" in backbone else ""
        width = int(backbone[f"{prefix}conv.weight"].shape[0])
        layers = _stages(keys, r"stages\.(\d+)\.blocks\.(\d+)\.conv1\.weight$")
        if bool(prefix) != bool(layers):
            raise ValueError("a ResNetV2 stem and stages don't go together this way")
        widths = [int(backbone[f"stages.{i}.blocks.0.conv3.weight"].shape[0])
                      for i in range(len(layers))]  # fmt: skip
        return StemConfig("resnetv2", tuple(layers), width, tuple(widths), p)
    except (KeyError, ValueError) as exc:
        raise CheckpointError(
            f"{source.name}: its patch_embed.backbone is not a backbone vitviz models (timm's "
            f"ResNetV2 or ResNet-D): {exc}."
        ) from exc


def check_backbone(source: Source, stem: StemConfig, backbone: dict[str, Tensor], C: int) -> None:
    """Refuse unless the tensors are exactly those of vitviz's backbone for ``stem``."""
    with torch.device("meta"):
        want = {k: tuple(v.shape) for k, v in make_backbone(stem, C).state_dict().items()}
    have = {k: tuple(v.shape) for k, v in backbone.items()}
    extra = sorted(set(have) - set(want))
    missing = sorted(set(want) - set(have))
    wrong = sorted(k for k in set(want) & set(have) if want[k] != have[k])
    if extra or missing or wrong:
        what = (
            f"tensors vitviz's stem can't express ({', '.join(BACKBONE + k for k in extra[:3])})"
            if extra
            else f"missing {BACKBONE}{missing[0]}"
            if missing
            else f"{BACKBONE}{wrong[0]} of shape {have[wrong[0]]}, not {want[wrong[0]]}"
        )
        raise CheckpointError(f"{source.name}: its {stem.words()} has {what}.")


def convert(source: Source) -> Conversion:
    cfg = source.timm_config or {}
    args: dict[str, Any] = dict(cfg.get("model_args") or {})
    pretrained: dict[str, Any] = dict(cfg.get("pretrained_cfg") or {})
    choice = choose_architecture(source, cfg, args, _pos_layout(source.state))
    source.user.pop("arch", None)
    t = Taker(source, LOOKS_LIKE)
    notes: list[str] = []
    out: dict[str, Tensor] = {}
    depth = check_depth(source, block_indices(t.state, _BLOCK))
    backbone = {k[len(BACKBONE) :]: t.state.pop(k) for k in list(t.state) if k.startswith(BACKBONE)}
    proj = t.maybe("patch_embed.proj.weight")
    stem = read_stem(source, backbone, proj)
    settings: dict[str, Any] = {}
    if choice is not None:
        settings = dict(choice.record.settings.get("stem") or {})
        if settings.pop("kind", stem.kind) != stem.kind:
            raise CheckpointError(
                f"{source.name}: timm's {choice.record.name} has another backbone than these "
                f"tensors (give the right one with {how_to_name(source)})."
            )
    else:
        notes.append(
            "no timm architecture named or recognised: timm's hybrid backbone settings are "
            "assumed (TF 'SAME' padding, weight-standardisation eps 1e-8, GroupNorm of 32 "
            f"groups eps 1e-5 / BatchNorm eps 1e-5); if yours differs give {how_to_name(source)}"
        )
    stem = StemConfig(**{**stem.__dict__, **settings})
    if proj is not None and (proj.ndim != 4 or int(proj.shape[1]) != stem.feature_dim):
        raise CheckpointError(
            f"{source.name}: patch_embed.proj {tuple(proj.shape)} does not read the backbone's "
            f"{stem.feature_dim} channels."
        )
    first = ("conv1.0.weight", "stem.conv.weight", "conv.weight", "0.conv.weight")
    C = int(backbone[next(k for k in first if k in backbone)].shape[1])
    check_backbone(source, stem, backbone, C)
    out.update({BACKBONE + k: aligned(v) for k, v in backbone.items()})
    D = stem.feature_dim
    if proj is not None:
        out["patch_embed.proj.weight"] = aligned(proj)
        D = int(proj.shape[0])
        bias = t.maybe("patch_embed.proj.bias")
        zero = torch.zeros(D, dtype=proj.dtype)
        out["patch_embed.proj.bias"] = bias if bias is not None else zero
    prefix = take_prefix_and_pos(t, out)
    pos = out.get("pos_embed")
    for name in ("norm_pre", "norm", "fc_norm"):
        if f"{name}.weight" in t:
            out[f"{name}.weight"] = t.take(f"{name}.weight")
            out[f"{name}.bias"] = t.take(f"{name}.bias")
    block_info = take_blocks(t, depth, out)
    num_classes = take_head(t, out)
    t.refuse_leftovers()

    has_cls = "cls_token" in out
    pool = cfg.get("global_pool", args.get("global_pool"))
    if pool is None:
        pool = "avg" if ("fc_norm.weight" in out or not has_cls) else "token"
    inferred: dict[str, Any] = dict(
        patch_size=stem.stride, in_channels=C, dim=D, depth=depth, num_classes=num_classes,
        class_token=has_cls, distill_token="dist_token" in out,
        num_register_tokens=out["reg_token"].shape[1] if "reg_token" in out else 0,
        pos_embed="learned" if pos is not None else "none", global_pool=pool,
        fc_norm="fc_norm.weight" in out, pre_norm="norm_pre.weight" in out,
        final_norm="norm.weight" in out or "fc_norm.weight" in out,
        patch_embed="hybrid", stem=stem, **block_info,
    )  # fmt: skip
    if choice is None:
        heads = standard_heads(D)
        inferred.update(activation="gelu", norm_eps=1e-6)
        if heads is not None:
            inferred["heads"] = heads
    else:
        found = applied(source, choice.record, inferred)
        found.pop("stem", None)
        inferred.update(found)
        notes.append(choice.note)
        if not choice.own_sizes:  # named for other sizes: its head count is not theirs
            for key in ("heads", "attn_head_dim"):
                inferred.pop(key, None)
    if inferred["global_pool"] not in ("token", "avg"):
        raise CheckpointError(
            f"{source.name}: timm global_pool {inferred['global_pool']!r} is not supported."
        )
    inferred["pos_embed_interp"] = "bicubic_antialias"
    no_embed_class = inferred.pop("no_embed_class", args.get("no_embed_class"))
    size = args.get("img_size")
    if size is None and isinstance(pretrained.get("input_size"), (list, tuple)):
        size = list(pretrained["input_size"][1:])
    if no_embed_class is None and pos is not None:  # does the table hold the prefix tokens?
        n, r = int(pos.shape[1]), stem.stride
        if size is not None:
            h, w = (size, size) if isinstance(size, int) else tuple(size)
            no_embed_class = prefix > 0 and n == (h // r) * (w // r)
        else:
            square = grid_from_table(n - prefix) is not None
            no_embed_class = prefix > 0 and not square and grid_from_table(n) is not None
    no_embed_class = inferred["no_embed_class"] = bool(no_embed_class)
    if size is None and pos is not None:
        grid = grid_from_table(int(pos.shape[1]) - (0 if no_embed_class else prefix))
        if grid is not None:
            size = (grid[0] * stem.stride, grid[1] * stem.stride)
            notes.append(
                f"image size {size[0]}×{size[1]} inferred from the square position table; set "
                f"image_size in {source.sidecar_name} if it was not square"
            )
    if size is not None:
        inferred["image_size"] = size
    resnet_d = stem.kind == "resnet_d"  # timm's ResNet-D hybrids: ImageNet mean and std
    defaults = TIMM_DEIT_DEFAULTS | {"crop_pct": 0.9} if resnet_d else TIMM_VIT_DEFAULTS
    prep = timm_preprocessing_noted(source, pretrained, defaults, notes, "hybrid")
    conversion = finish(
        source,
        family="timm-hybrid",
        looks_like=LOOKS_LIKE,
        inferred=inferred,
        required={"heads": example_heads(D), "image_size": 224},
        state=out,
        class_names=names_from_timm(cfg, num_classes),
        preprocessing=prep,
        notes=notes,
        imagenet_if_1000=True,
    )
    conversion.reference = _library_reference(choice, conversion.config)
    return conversion


def _library_reference(choice: Choice | None, cfg: Any) -> Reference:
    """timm's hybrid of the name with the file's ViT sizes (width, depth, heads, MLP ratio: the
    name's backbone is the file's, or its tensors refuse it); with no name, the note that timm
    builds a hybrid's backbone from its name alone."""
    if choice is None:
        return Reference(
            "timm", "", {}, shown_as="hybrid ViT", how=LIBRARY_MODEL,
            unexpressible="timm builds a hybrid's backbone from its name alone, and no timm "
            "name has these tensors (give it with --arch NAME)",
        )  # fmt: skip
    ref = choice.reference
    ratio = cfg.hidden_dim / cfg.dim
    if int(cfg.dim * ratio) != cfg.hidden_dim:
        ratio = (cfg.hidden_dim + 0.5) / cfg.dim
    sizes = {"embed_dim": cfg.dim, "depth": cfg.depth, "num_heads": cfg.heads, "mlp_ratio": ratio}
    words = f"width {cfg.dim}, depth {cfg.depth}, {cfg.heads} heads"
    return dataclasses.replace(ref, model_args={**ref.model_args, **sizes}, settings=words)


FAMILY = Family(
    "timm-hybrid",
    detect,
    convert,
    info=FamilyInfo(
        label="timm hybrid ViT (a ResNet before the tokens)",
        names="vit_*_r26_s32_*, vit_*_r50_s*, vit_tiny_r_s16_p8_*, vit_*_resnet26d_224, "
        "vit_*_resnet50d*_224, vit_base_mci_224",
        forms="state dict (.pth, .safetensors); timm folder",
        parts=(
            "ResNetV2 (weight-standardised convs, GroupNorm), ResNet-D (BatchNorm) or "
            "MobileCLIP's conv stem",
            "Conv2d projection to the tokens",
            "attention",
            "pre-norm blocks",
            "GELU MLP",
            "learnt position table",
            "CLS token",
        ),
    ),
)
