"""timm's VOLO (``volo_d1_224``, ``_d1_384``, ``_d2_224``, ``_d2_384``, ``_d3_224``, ``_d3_448``,
``_d4_224``, ``_d4_448``, ``_d5_224``, ``_d5_448``, ``_d5_512``): bare state dicts (.pth,
.safetensors) and timm's folders (config.json + model.safetensors, ``save_for_hf``).

Keys (vitviz's network uses timm's names): ``patch_embed.conv.{0,1,3,4,6,7}`` (convs and
BatchNorms), ``patch_embed.proj``, ``network.0.{j}`` (outlookers: ``attn.v``, ``attn.attn``,
``attn.proj``), ``network.1.proj`` (the downsample), ``network.{2..}.{j}`` (transformer blocks),
``pos_embed`` (1, h, w, D), ``cls_token``, ``post_network.{j}`` (class blocks: ``attn.kv``,
``attn.q``, ``attn.proj``), ``norm``, ``head``, ``aux_head``. The weights say the depths, widths,
MLP widths, the stem, the patch size, the image size (the position table's grid is the input's
/ 2·patch), the outlookers' heads (their weight Linear has k⁴ outputs a head) and the classes;
the transformer and class blocks' heads come from the timm name (config.json's
``architecture``, ``--arch``, the name the shapes are); a file with none is refused in one line
asking for ``--arch``.

The library check builds timm's ``VOLO`` with the file's sizes and the heads (like with like,
DESIGN §4) and reads every outlooker's, transformer block's and class block's attention.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from vitviz.checkpoints.errors import CheckpointError, MissingSettingsError
from vitviz.checkpoints.families.base import Conversion, Family, FamilyInfo, Source
from vitviz.checkpoints.families.common import (
    KIND_EXTRAS,
    aligned_state,
    timm_crop,
    timm_mlp_ratio,
)
from vitviz.checkpoints.families.reference import LibraryReference
from vitviz.checkpoints.families.timm_library import file_state, read_timm
from vitviz.checkpoints.families.timm_names import timm_version
from vitviz.checkpoints.library_check import Reference
from vitviz.kinds.timm_family import TimmKind, finish_timm_kind
from vitviz.kinds.volo.config import VOLOConfig

LOOKS_LIKE = "a timm VOLO"
KERNEL = 3  # timm's outlookers: 3 × 3 neighbourhoods, stride 2
_STAGE_BLOCK = re.compile(r"network\.(\d+)\.(\d+)\.norm1\.weight$")
_CLASS_BLOCK = re.compile(r"post_network\.(\d+)\.norm1\.weight$")
# timm's VOLO bases: (depths, widths, heads, stem width); MLP ratio 3 (d5: 4)
KNOWN: dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], int, int]] = {
    "volo_d1": ((4, 4, 8, 2), (192, 384, 384, 384), (6, 12, 12, 12), 3, 64),
    "volo_d2": ((6, 4, 10, 4), (256, 512, 512, 512), (8, 16, 16, 16), 3, 64),
    "volo_d3": ((8, 8, 16, 4), (256, 512, 512, 512), (8, 16, 16, 16), 3, 64),
    "volo_d4": ((8, 8, 16, 4), (384, 768, 768, 768), (12, 16, 16, 16), 3, 64),
    "volo_d5": ((12, 12, 20, 4), (384, 768, 768, 768), (12, 16, 16, 16), 4, 128),
}
NAMES = (
    "volo_d1_224", "volo_d1_384", "volo_d2_224", "volo_d2_384", "volo_d3_224", "volo_d3_448",
    "volo_d4_224", "volo_d4_448", "volo_d5_224", "volo_d5_448", "volo_d5_512",
)  # fmt: skip
_DEFAULTS = timm_crop(0.96)
EXTRAS = KIND_EXTRAS


def attention_blocks(model: nn.Module) -> list[nn.Module]:
    """timm's VOLO's attention blocks in the order they run: outlookers, transformer blocks,
    class blocks."""
    stages = [s for s in model.network if isinstance(s, nn.Sequential)]
    return [b for stage in stages for b in stage] + list(model.post_network or [])


def _mlp_ratio(config: VOLOConfig) -> tuple[float, ...]:
    """timm's MLP ratio per stage giving each stage's MLP width (int(dim · ratio))."""
    return tuple(
        timm_mlp_ratio(d, h) for d, h in zip(config.dims, config.mlp_hidden_dims, strict=True)
    )


def library_args(config: VOLOConfig) -> dict[str, Any]:
    """timm's VOLO keywords of the file's model (sizes, heads, class blocks, heads)."""
    return dict(
        layers=list(config.depths),
        embed_dims=list(config.dims),
        num_heads=list(config.heads),
        mlp_ratio=list(_mlp_ratio(config)),
        stem_hidden_dim=config.stem_hidden_dim,
        patch_size=config.patch_size,
        in_chans=config.in_channels,
        num_classes=config.num_classes,
        qkv_bias=config.qkv_bias,
        post_layers=["ca"] * config.class_blocks,
        use_aux_head=config.aux_head,
    )


def build_volo(arch: str, model_args: dict[str, Any], cfg: Any, weights: Path) -> nn.Module:
    """timm's ``VOLO`` with the file's sizes (``model_args``, the folder's own args over them)
    holding the file's tensors (strict)."""
    from timm.models.volo import VOLO

    state = aligned_state(file_state(weights))
    args = {**library_args(cfg), **dict(model_args)}
    args.setdefault("img_size", tuple(cfg.image_size))
    with torch.device("meta"):
        model = VOLO(**args)
    model.load_state_dict(state, strict=True, assign=True)
    return model.eval()


def _read(model: nn.Module, x: Tensor) -> tuple[Tensor, list[Tensor] | None]:
    return read_timm(model, x, blocks=attention_blocks)


LIBRARY_MODEL = LibraryReference(build_volo, _read)


def detect(source: Source) -> bool:
    s = source.state
    return "network.0.0.attn.attn.weight" in s and "patch_embed.conv.0.weight" in s


def _fail(source: Source, what: str) -> CheckpointError:
    return CheckpointError(f"{source.name} looks like {LOOKS_LIKE}, but {what}.")


def _count(source: Source, pattern: re.Pattern[str]) -> dict[int, int]:
    """{group 1: blocks} of the keys ``pattern`` matches, checked to be numbered 0..n-1."""
    found: dict[int, set[int]] = {}
    for key in source.state:
        m = pattern.match(key)
        if m:
            groups = [int(g) for g in m.groups()]
            found.setdefault(groups[0] if len(groups) == 2 else 0, set()).add(groups[-1])
    for idx, js in found.items():
        if sorted(js) != list(range(len(js))):
            raise _fail(source, f"the blocks of network.{idx} are not numbered 0..n-1")
    return {k: len(v) for k, v in found.items()}


def _shape(source: Source) -> dict[str, Any]:
    """What the weights say: depths, widths, MLP widths, the outlookers' heads, the stem, the
    patch and image size, the class blocks, the heads' classes."""
    s = source.state
    stages = _count(source, _STAGE_BLOCK)
    if "network.1.proj.weight" not in s or 1 in stages:
        raise _fail(source, "it has no downsample (network.1.proj) after its outlookers")
    transformer = sorted(i for i in stages if i >= 2)
    if sorted(stages) != [0, *range(2, 2 + len(transformer))] or not transformer:
        raise _fail(source, "its network is not outlookers, a downsample and transformer stages")
    if any(f"network.{i}.0.attn.attn.weight" in s for i in transformer):
        raise _fail(source, "it has outlookers after the downsample, which no timm volo_* name "
                    "has and vitviz does not model")  # fmt: skip
    classes = _count(source, _CLASS_BLOCK).get(0, 0)
    if not classes:
        raise _fail(source, "it has no class-attention blocks (post_network): vitviz models a "
                    "VOLO whose head reads the CLS of its class blocks")  # fmt: skip
    needed = ["patch_embed.proj.weight", "pos_embed", "cls_token", "norm.weight",
              "network.0.0.mlp.fc1.weight", "network.1.proj.weight"]  # fmt: skip
    needed += [f"network.{i}.0.mlp.fc1.weight" for i in transformer]
    missing = [k for k in needed if k not in s]
    if missing:
        raise _fail(source, f"it lacks {', '.join(missing[:3])}")
    dims = [int(s["network.0.0.norm1.weight"].shape[0])]
    dims += [int(s[f"network.{i}.0.norm1.weight"].shape[0]) for i in transformer]
    hidden = [int(s["network.0.0.mlp.fc1.weight"].shape[0])]
    hidden += [int(s[f"network.{i}.0.mlp.fc1.weight"].shape[0]) for i in transformer]
    weights_out = int(s["network.0.0.attn.attn.weight"].shape[0])
    if weights_out % KERNEL**4:
        raise _fail(source, f"its outlook weight Linear has {weights_out} outputs, no multiple "
                    f"of {KERNEL**4} (3 × 3 neighbourhoods)")  # fmt: skip
    pos, proj = s["pos_embed"], s["patch_embed.proj.weight"]
    if pos.ndim != 4 or proj.ndim != 4:
        raise _fail(source, "its pos_embed is not (1, h, w, D) or its patch_embed.proj no conv")
    patch = 2 * int(proj.shape[-1])
    head = s.get("head.weight")
    return dict(
        depths=(stages[0], *(stages[i] for i in transformer)),
        dims=tuple(dims),
        mlp_hidden_dims=tuple(hidden),
        outlook_heads=weights_out // KERNEL**4,
        stem_hidden_dim=int(s["patch_embed.conv.0.weight"].shape[0]),
        in_channels=int(s["patch_embed.conv.0.weight"].shape[1]),
        patch_size=patch,
        image_size=(2 * patch * int(pos.shape[1]), 2 * patch * int(pos.shape[2])),
        class_blocks=classes,
        qkv_bias="network.0.0.attn.v.bias" in s,
        aux_head="aux_head.weight" in s,
        num_classes=int(head.shape[0]) if head is not None else 0,
    )


def recognised(shape: dict[str, Any]) -> str | None:
    """The timm name whose tensors these are (depths, widths, MLP widths, stem, image size)."""
    for base, (depths, dims, _heads, ratio, stem) in KNOWN.items():
        hidden = tuple(ratio * d for d in dims)
        if (depths, dims, hidden, stem) != (
            shape["depths"], shape["dims"], shape["mlp_hidden_dims"], shape["stem_hidden_dim"],
        ):  # fmt: skip
            continue
        if shape["class_blocks"] != 2 or shape["patch_size"] != 8:
            continue
        name = f"{base}_{shape['image_size'][0]}"
        return name if name in NAMES else f"{base}_224"
    return None


def _heads(
    source: Source, shape: dict[str, Any], args: dict[str, Any]
) -> tuple[str, tuple[int, ...], list[str]]:
    """(the timm name, its heads, notes): ``--arch``, the folder's ``architecture`` or the name
    the tensors are; a one-line refusal without any, of a name timm lacks, or of one whose heads
    in timm (with the folder's ``args``) are not vitviz's table's."""
    user_arch = source.user.pop("arch", None)
    name = user_arch or (source.timm_config or {}).get("architecture")
    notes: list[str] = []
    if name is None:
        name = recognised(shape)
        if name is None:
            raise MissingSettingsError(
                f"{source.name} looks like {LOOKS_LIKE}, but its tensors are none of timm's "
                f"volo_* names and the weights don't say the transformer blocks' heads: give "
                f"the timm name whose heads it has with --arch NAME.",
                {"arch": "volo_d1_224"},
            )
        notes.append(f"recognised as timm's {name} from its tensors (heads as timm defines it)")
    base = str(name).rsplit("_", 1)[0]
    if base not in KNOWN:
        raise CheckpointError(
            f"{source.name}: vitviz knows timm's volo_d1 to volo_d5 names, not {name}."
        )
    heads = KNOWN[base][2]
    if timm_version() is not None:  # the name's own heads, as the library check builds it
        theirs = timm_heads(source, str(name), args)
        if theirs != heads:
            raise CheckpointError(
                f"{source.name}: timm's {name} has heads {'-'.join(map(str, theirs))}, vitviz's "
                f"table {'-'.join(map(str, heads))}: refused rather than shown with either."
            )
    return str(name), heads, notes


def timm_heads(source: Source, name: str, args: dict[str, Any]) -> tuple[int, ...]:
    """Each stage's heads (outlookers, then each transformer stage) of timm's ``name`` with the
    folder's ``args``, built on the meta device; a one-line refusal of a name timm lacks."""
    import timm

    kwargs = {k: v for k, v in args.items() if k not in ("pretrained", "img_size")}
    try:
        with torch.device("meta"):
            model = timm.create_model(name, pretrained=False, **kwargs)
    except Exception as exc:  # timm's own error: an unknown name, arguments it refuses
        raise CheckpointError(
            f"{source.name}: timm can't build {name} ({type(exc).__name__}: {exc})."
        ) from exc
    stages = [m for m in getattr(model, "network", ()) if isinstance(m, nn.Sequential)]
    if type(model).__name__ != "VOLO" or not stages:
        raise CheckpointError(f"{source.name}: timm's {name} is a {type(model).__name__}, not "
                              "a VOLO.")  # fmt: skip
    return tuple(int(stage[0].attn.num_heads) for stage in stages)


TIMM = TimmKind("volo", VOLOConfig, ("a VOLO", "VOLO"), "timm-volo", _DEFAULTS)


def convert(source: Source) -> Conversion:
    cfg = source.timm_config or {}
    args: dict[str, Any] = dict(cfg.get("model_args") or {})
    pool = args.get("global_pool", cfg.get("global_pool", "token"))
    if pool != "token":
        raise _fail(source, f"its global_pool is {pool!r}: vitviz models the head on the CLS "
                    "(timm's 'token', every volo_* name's)")  # fmt: skip
    shape = _shape(source)
    name, heads, notes = _heads(source, shape, args)
    inferred = {k: v for k, v in shape.items() if k != "outlook_heads"}
    if len(heads) != len(shape["depths"]):
        raise _fail(source, f"it has {len(shape['depths'])} stages; timm's {name} has "
                    f"{len(heads)}")  # fmt: skip
    inferred["heads"] = heads
    inferred["kernel_size"] = KERNEL
    conversion = finish_timm_kind(source, TIMM, inferred, shape["num_classes"], notes)
    config = conversion.config
    if config.heads[0] != shape["outlook_heads"]:
        raise _fail(
            source,
            f"its outlookers have {shape['outlook_heads']} heads (their weight Linear's outputs "
            f"/ {KERNEL**4}); the settings say {config.heads[0]}",
        )
    given = {k: v for k, v in args.items() if k not in ("global_pool",)}
    words = f"this file's depths, widths and heads {'-'.join(map(str, config.heads))}"
    conversion.reference = Reference("timm", name, given, words, how=LIBRARY_MODEL)
    return conversion


def volo_parts(config: VOLOConfig) -> tuple[str, ...]:
    """A VOLO's parts in words."""
    (h0, w0), (h1, w1) = config.stage_grids()
    k, st = config.kernel_size, config.outlook_stride
    aux = " + 0.5 · the maximum over the patches of the aux head" if config.aux_head else ""
    return (
        f"conv stem (7 × 7 / 2 and two 3 × 3, BatchNorm, ReLU; {config.stem_hidden_dim} "
        f"channels) and a patch conv to a {h0}×{w0} grid of {config.patch_size} px",
        f"{config.depths[0]} outlookers: {k} × {k} outlook attention on a stride-{st} lattice",
        f"a 2 × 2 strided conv to {h1}×{w1} and a learned position table",
        f"{sum(config.depths[1:])} pre-norm transformer blocks (LayerNorm eps "
        f"{config.norm_eps:g}), fused qkv, GELU MLP",
        f"a CLS token through {config.class_blocks} class-attention blocks",
        f"final LayerNorm; the head on the CLS{aux}",
    )


FAMILY = Family(
    "timm-volo",
    detect,
    convert,
    info=FamilyInfo(
        label="timm VOLO",
        names="volo_d1_224/384, volo_d2_224/384, volo_d3_224/448, volo_d4_224/448, "
        "volo_d5_224/448/512",
        forms="state dict (.pth, .safetensors); timm folder",
        parts=(
            "a conv stem and a patch conv",
            "outlookers (outlook attention over 3 × 3 neighbourhoods)",
            "a downsample and pre-norm transformer blocks",
            "class-attention blocks from a CLS token",
            "head(CLS) + 0.5 · max over the patches of the aux head",
        ),
    ),
)
