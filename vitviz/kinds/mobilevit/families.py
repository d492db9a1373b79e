"""timm's MobileViT (``mobilevit_xxs``, ``mobilevit_xs``, ``mobilevit_s``): bare state dicts
(.pth, .safetensors) and timm's folders (config.json + model.safetensors, ``save_for_hf``).

Keys (vitviz's network uses timm's names): ``stem.{conv, bn}``, ``stages.{s}.{j}``: an inverted
residual's ``conv1_1x1``, ``conv2_kxk``, ``conv3_1x1`` ({conv, bn}), a MobileViT block's
``conv_kxk``, ``conv_1x1``, ``transformer.{k}.{norm1, attn.qkv, attn.proj, norm2, mlp.fc1,
mlp.fc2}``, ``norm``, ``conv_proj``, ``conv_fusion``; ``final_conv``, ``head.fc``. The weights
say every width and depth, the hidden widths, the classes. They don't say the heads, the patch
size or the strides: those come from timm's own model of the architecture's name (config.json's
``architecture``, ``--arch``), else a bare file whose shapes are one of timm's three names is
recognised as it (and noted), else ``stage_heads``, ``patch_size`` and ``strides`` in its
settings. MobileViTV2 (separable attention) is refused by name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from vitviz.checkpoints.errors import CheckpointError, MissingSettingsError
from vitviz.checkpoints.families.base import Conversion, Family, FamilyInfo, Source
from vitviz.checkpoints.families.common import KIND_EXTRAS, aligned_state, timm_mlp_ratio
from vitviz.checkpoints.families.reference import LibraryReference
from vitviz.checkpoints.families.timm_library import build_timm, file_state, read_timm
from vitviz.checkpoints.families.timm_names import timm_version
from vitviz.checkpoints.library_check import Reference
from vitviz.checkpoints.preprocessing import timm_preprocessing
from vitviz.core.optional import install_to_open
from vitviz.kinds.mobilevit.config import MobileViTConfig
from vitviz.kinds.numbered_blocks import numbered_stages
from vitviz.kinds.timm_family import TimmKind, finish_timm_kind

LOOKS_LIKE = "a timm MobileViT"
_BLOCK = re.compile(r"stages\.(\d+)\.(\d+)\.")
_LAYER = re.compile(r"stages\.(\d+)\.(\d+)\.transformer\.(\d+)\.attn\.qkv\.weight$")
_V2 = re.compile(r"stages\.\d+\.\d+\.transformer\.\d+\.attn\.qkv_proj\.weight$")
# timm's MobileViT names: (stem, widths, inverted residuals, transformer widths, final width)
KNOWN: dict[str, tuple[int, tuple[int, ...], tuple[int, ...], tuple[int, ...], int]] = {
    "mobilevit_xxs": (16, (16, 24, 48, 64, 80), (1, 3, 1, 1, 1), (0, 0, 64, 80, 96), 320),
    "mobilevit_xs": (16, (32, 48, 64, 80, 96), (1, 3, 1, 1, 1), (0, 0, 96, 120, 144), 384),
    "mobilevit_s": (16, (32, 64, 96, 128, 160), (1, 3, 1, 1, 1), (0, 0, 144, 192, 240), 640),
}
KNOWN_DEPTHS = (0, 0, 2, 4, 3)
KNOWN_SETTINGS = {"heads": (0, 0, 4, 4, 4), "patch_size": 2, "strides": (1, 2, 2, 2, 2)}
_DEFAULTS = {
    "resize": "crop",
    "crop_pct": 0.9,
    "interpolation": "bicubic",
    "mean": (0.0, 0.0, 0.0),  # timm's MobileViTs read pixels in [0, 1]
    "std": (1.0, 1.0, 1.0),
    "image_size": (256, 256),
}
EXTRAS = KIND_EXTRAS


# -- timm's model as the library check builds and reads it ------------------------------------
def library_layers(model: nn.Module) -> list[nn.Module]:
    """timm's MobileViT's transformer layers in order (each MobileVitBlock's ``transformer``)."""
    blocks = [b for stage in model.stages for b in stage]
    return [layer for b in blocks for layer in getattr(b, "transformer", ())]


def _make_divisible(v: float, divisor: int = 8) -> int:
    """timm's ``make_divisible`` (round to a multiple of 8, never more than 10% down)."""
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


def byob_stages(config: MobileViTConfig) -> list[dict[str, Any]] | None:
    """The stages of timm's ByobNet that compute ``config`` (each: its IR blocks' depth,
    width, stride and bottleneck ratio, its MobileViT block's settings), None where timm's
    one ratio per stage can't give these hidden widths."""
    stages = []
    c_in = config.stem_dim
    for s in range(config.num_stages):
        hidden, c = config.ir_hidden[s], config.dims[s]
        ratio = hidden[0] / c_in if hidden else 1.0
        widths = [_make_divisible((c_in if j == 0 else c) * ratio) for j in range(len(hidden))]
        if list(hidden) != widths:
            return None
        stages.append(dict(
            ir=len(hidden), c=c, s=config.strides[s], br=ratio, depth=config.depths[s],
            dim=config.transformer_dims[s], heads=config.heads[s],
            mlp_ratio=timm_mlp_ratio(config.transformer_dims[s], config.mlp_dims[s]),
        ))  # fmt: skip
        c_in = c
    return stages


def build_library(arch: str, model_args: Mapping[str, Any], cfg: Any, weights: Path) -> nn.Module:
    """timm's named MobileViT (``model_args`` as the folder has them), or, for a file of the
    user's settings, timm's ByobNet built with ``model_args["byob"]`` stages: the file's
    tensors in it, strict."""
    if "byob" not in model_args:
        return build_timm(arch, model_args, cfg, weights)
    from timm.models.byobnet import ByoBlockCfg, ByobNet, ByoModelCfg

    blocks = []
    for st in model_args["byob"]:
        parts = []
        if st["ir"]:
            parts.append(ByoBlockCfg(
                type="bottle", d=st["ir"], c=st["c"], s=st["s"], gs=1, br=st["br"],
                block_kwargs=dict(bottle_in=True, linear_out=True),
            ))  # fmt: skip
        if st["depth"]:
            parts.append(ByoBlockCfg(
                type="mobilevit", d=1, c=st["c"], s=1, block_kwargs=dict(
                    transformer_dim=st["dim"], transformer_depth=st["depth"],
                    patch_size=model_args["patch_size"], num_heads=st["heads"],
                    mlp_ratio=st["mlp_ratio"],
                ),
            ))  # fmt: skip
        blocks.append(tuple(parts))
    byob = ByoModelCfg(
        blocks=tuple(blocks), stem_chs=model_args["stem_chs"], stem_type="3x3", stem_pool="",
        downsample="", act_layer="silu", num_features=model_args["num_features"],
    )  # fmt: skip
    model = ByobNet(cfg=byob, num_classes=cfg.num_classes, in_chans=cfg.in_channels)
    state = aligned_state(file_state(weights))
    model.load_state_dict(state, strict=True)
    return model.eval()


def _read(model: nn.Module, x: Tensor) -> tuple[Tensor, list[Tensor] | None]:
    return read_timm(model, x, blocks=library_layers)


LIBRARY_MODEL = LibraryReference(build_library, _read)


# -- reading a file --------------------------------------------------------------------------
def detect(source: Source) -> bool:
    s = source.state
    return "stem.conv.weight" in s and any(_LAYER.match(k) or _V2.match(k) for k in s)


def _fail(source: Source, what: str) -> CheckpointError:
    return CheckpointError(f"{source.name} looks like {LOOKS_LIKE}, but {what}.")


def _weight(source: Source, key: str) -> Tensor:
    t = source.state.get(key)
    if t is None:
        raise _fail(source, f"it lacks {key}")
    if t.ndim not in (1, 2, 4):
        raise _fail(source, f"its {key} is {tuple(t.shape)}")
    return t


def _shape(source: Source) -> dict[str, Any]:
    """What the weights say: stem, widths, inverted residuals and their hidden widths, each
    MobileViT block's width, layers and MLP width, the final width and the classes."""
    s = source.state
    if any(_V2.match(k) for k in s):
        raise CheckpointError(
            f"{source.name}: this is timm's MobileViTV2 (separable self-attention: one score per "
            "token, no query-key map), which vitviz does not model."
        )
    found = numbered_stages(s, _BLOCK, partial(_fail, source))
    stages = list(found)
    stem = _weight(source, "stem.conv.weight")
    dims, ir_hidden, depths, tdims, mlps = [], [], [], [], []
    for st in stages:
        hidden: list[int] = []
        depth = tdim = mlp = 0
        c = 0
        for j in range(len(found[st])):
            p = f"stages.{st}.{j}"
            if f"{p}.conv1_1x1.conv.weight" in s:
                if depth:
                    raise _fail(source, f"its block {st}.{j} follows the stage's MobileViT block")
                hidden.append(int(_weight(source, f"{p}.conv1_1x1.conv.weight").shape[0]))
                c = int(_weight(source, f"{p}.conv3_1x1.conv.weight").shape[0])
            elif f"{p}.conv_1x1.weight" in s:
                if depth:
                    raise _fail(source, f"its stage {st} has two MobileViT blocks")
                layers = {int(m.group(3)) for k in s if (m := _LAYER.match(k))
                          and (int(m.group(1)), int(m.group(2))) == (st, j)}  # fmt: skip
                if sorted(layers) != list(range(len(layers))) or not layers:
                    raise _fail(source, f"its block {st}.{j}'s layers are not numbered 0..n-1")
                depth = len(layers)
                tdim = int(_weight(source, f"{p}.conv_1x1.weight").shape[0])
                mlp = int(_weight(source, f"{p}.transformer.0.mlp.fc1.weight").shape[0])
                c = int(_weight(source, f"{p}.conv_fusion.conv.weight").shape[0])
            else:
                raise _fail(source, f"its block {st}.{j} is no inverted residual or MobileViT")
        dims.append(c)
        ir_hidden.append(tuple(hidden))
        depths.append(depth)
        tdims.append(tdim)
        mlps.append(mlp)
    head = s.get("head.fc.weight")
    return dict(
        in_channels=int(stem.shape[1]),
        stem_dim=int(stem.shape[0]),
        dims=tuple(dims),
        ir_depths=tuple(len(h) for h in ir_hidden),
        ir_hidden=tuple(ir_hidden),
        depths=tuple(depths),
        transformer_dims=tuple(tdims),
        mlp_dims=tuple(mlps),
        final_dim=int(_weight(source, "final_conv.conv.weight").shape[0]),
        qkv_bias=any(k.endswith("attn.qkv.bias") for k in s),
        num_classes=int(head.shape[0]) if head is not None else 0,
    )


def recognised(shape: dict[str, Any]) -> str | None:
    """The timm name whose tensors these are."""
    for name, (stem, dims, irs, tdims, final) in KNOWN.items():
        if (stem, dims, irs, tdims, final, KNOWN_DEPTHS) == (
            shape["stem_dim"], shape["dims"], shape["ir_depths"], shape["transformer_dims"],
            shape["final_dim"], shape["depths"],
        ):  # fmt: skip
            return name
    return None


def from_timm(name: str, args: dict[str, Any]) -> dict[str, Any]:
    """Heads, patch size and strides of timm's own ``name`` (built on the meta device)."""
    import timm

    kwargs = {k: v for k, v in args.items() if k not in ("pretrained", "img_size")}
    try:
        with torch.device("meta"):
            model = timm.create_model(name, pretrained=False, **kwargs)
    except Exception as exc:  # timm's own error: an unknown name, arguments it refuses
        raise CheckpointError(f"timm can't build {name} ({type(exc).__name__}: {exc})") from exc
    blocks = [type(b).__name__ for st in getattr(model, "stages", ()) for b in st]
    if type(model).__name__ != "ByobNet" or "MobileVitBlock" not in blocks:
        raise CheckpointError(f"timm's {name} is a {type(model).__name__}, not a MobileViT")
    heads, strides, patch = [], [], set()
    for stage in model.stages:
        first = stage[0]
        conv = getattr(getattr(first, "conv2_kxk", None), "conv", None)
        strides.append(int(conv.stride[0]) if conv is not None else 1)
        mvit = [b for b in stage if type(b).__name__ == "MobileVitBlock"]
        heads.append(int(mvit[0].transformer[0].attn.num_heads) if mvit else 0)
        patch |= {int(b.patch_size[0]) for b in mvit} | {int(b.patch_size[1]) for b in mvit}
    if len(patch) != 1:
        raise CheckpointError(f"timm's {name} has patch sizes {sorted(patch)}; vitviz takes one")
    return {"heads": tuple(heads), "patch_size": patch.pop(), "strides": tuple(strides)}


def _settings(
    source: Source, shape: dict[str, Any], name: str | None, args: dict[str, Any]
) -> dict[str, Any]:
    """Heads, patch size and strides from timm, its definitions, or the user's settings."""
    if name and timm_version() is not None:
        return from_timm(name, args)
    if name in KNOWN and not args:
        return dict(KNOWN_SETTINGS)
    if name:
        raise CheckpointError(f"{source.name}: {install_to_open('timm', name)}.")
    if {"heads", "patch_size", "strides"} <= set(source.user):
        return {}
    example = {
        "stage_heads": [4 if d else 0 for d in shape["depths"]],
        "patch_size": 2,
        "strides": [1] + [2] * (len(shape["depths"]) - 1),
    }
    raise MissingSettingsError(
        f"{source.name} looks like {LOOKS_LIKE}, but its tensors are none of timm's mobilevit_* "
        "names and the weights don't say the heads, the patch size or the strides. Give the "
        f"timm name with --arch NAME, or them in {source.sidecar_name}, e.g. "
        f'{{"stage_heads": {example["stage_heads"]}, "patch_size": 2, "strides": '
        f"{example['strides']}}}.",
        example,
    )


def _name(source: Source, shape: dict[str, Any]) -> tuple[str | None, bool, list[str]]:
    """(the timm name, whether the user gave it, notes)."""
    if "stage_heads" in source.user:
        source.user["heads"] = source.user.pop("stage_heads")
    user_arch = source.user.pop("arch", None)
    name = user_arch or (source.timm_config or {}).get("architecture")
    notes: list[str] = []
    if name is None and "heads" not in source.user:
        name = recognised(shape)
        if name is not None:
            notes.append(
                f"recognised as timm's {name} from its tensors (4 heads, 2×2 patches as timm "
                f"defines it; set stage_heads, patch_size and strides in {source.sidecar_name} "
                "or --arch for another)"
            )
    return name, user_arch is not None, notes


def _unexpressible(config: MobileViTConfig) -> str:
    """Why timm's ByobNet can't be built as ``config`` (only the reasons that hold; "": it can)."""
    why = []
    if byob_stages(config) is None:
        why.append("one bottleneck ratio per stage, which can't give this file's widths")
    eps = {"LayerNorm": config.norm_eps, "BatchNorm": config.bn_eps}
    wrong = {k: v for k, v in eps.items() if v != 1e-5}
    if wrong:
        this = ", ".join(f"{k} {v:g}" for k, v in wrong.items())
        why.append(f"{' and '.join(wrong)} eps 1e-5 (this file: {this})")
    if not config.qkv_bias:
        why.append("a qkv bias (this file has none)")
    return f"timm's ByobNet has {'; '.join(why)}" if why else ""


def _library_args(config: MobileViTConfig) -> dict[str, Any] | None:
    """The ByobNet settings of ``config`` (None where timm's ratios can't say it)."""
    stages = byob_stages(config)
    if stages is None or _unexpressible(config):
        return None
    return dict(
        byob=stages, patch_size=config.patch_size, stem_chs=config.stem_dim,
        num_features=config.final_dim,
    )  # fmt: skip


TIMM = TimmKind(
    "mobilevit", MobileViTConfig, ("a MobileViT", "MobileViT"), "timm-mobilevit", _DEFAULTS
)


def convert(source: Source) -> Conversion:
    cfg = source.timm_config or {}
    args: dict[str, Any] = dict(cfg.get("model_args") or {})
    pretrained: dict[str, Any] = dict(cfg.get("pretrained_cfg") or {})
    shape = _shape(source)
    name, user_arch, notes = _name(source, shape)
    inferred = dict(shape)
    inferred.update(_settings(source, shape, name, {} if user_arch else args))
    prepared = timm_preprocessing(pretrained, _DEFAULTS)
    size = prepared[0].get("image_size") or _DEFAULTS["image_size"]
    inferred["image_size"] = tuple(size)[-2:]
    conversion = finish_timm_kind(source, TIMM, inferred, shape["num_classes"], notes, prepared)
    config = conversion.config
    words = (
        f"widths {'-'.join(map(str, config.dims))}, transformer widths "
        f"{'-'.join(str(d) for d in config.transformer_dims if d)}, heads "
        f"{'-'.join(str(h) for h in config.heads if h)}, {config.patch_size}×"
        f"{config.patch_size} patches"
    )
    if isinstance(name, str):  # timm's own model of that name, as the folder has it
        given = {} if user_arch else args
        conversion.reference = Reference("timm", name, given, words, how=LIBRARY_MODEL)
    else:
        library = _library_args(config)
        why = _unexpressible(config)
        conversion.reference = Reference(
            "timm", "mobilevit_xxs", library or {}, words, shown_as="ByobNet",
            unexpressible=why, how=LIBRARY_MODEL,
        )  # fmt: skip
    return conversion


def mobilevit_parts(config: MobileViTConfig) -> tuple[str, ...]:
    """A MobileViT's parts in words."""
    p = config.patch_size
    return (
        "3×3 conv stem (stride 2) with BatchNorm and SiLU",
        "MobileNetV2 inverted residual blocks (1×1 expand, depthwise 3×3, 1×1 reduce; BatchNorm, "
        "SiLU)",
        f"MobileViT blocks: 3×3 and 1×1 convs, the map unfolded into {p}×{p} patches, pre-norm "
        "transformer layers in which each pixel offset of a patch attends over that offset in "
        "every patch (SiLU MLP), LayerNorm, fold, 1×1 projection, 3×3 fusion with the block's "
        "input",
        f"1×1 conv to {config.final_dim} channels, average pool, head",
        "BatchNorm with its running statistics; no CLS token, no position embedding",
    )


FAMILY = Family(
    "timm-mobilevit",
    detect,
    convert,
    info=FamilyInfo(
        label="timm MobileViT",
        names="mobilevit_xxs, mobilevit_xs, mobilevit_s",
        forms="state dict (.pth, .safetensors); timm folder",
        parts=(
            "3×3 conv stem, MobileNetV2 inverted residual blocks (BatchNorm, SiLU)",
            "MobileViT blocks: local convs, unfold into p×p patches, transformer layers over "
            "each pixel offset's patches, fold, fusion conv",
            "1×1 conv, average pool, head",
        ),
    ),
)
