"""timm's XCiT (``xcit_{nano,tiny,small,medium,large}_{12,24}_p{8,16}_{224,384}``): a bare state
dict or timm's folder (``save_for_hf``); the official layout (``pos_embeder``, a fused ``qkv`` in
the class-attention blocks) is read too.

Keys: ``patch_embed.proj.{i}.{0, 1}`` (conv, BatchNorm), ``pos_embed.token_projection``,
``cls_token``, ``blocks.{i}.{norm1, attn.temperature, attn.qkv, attn.proj, norm3,
local_mp.{conv1, bn, conv2}, norm2, mlp.fc1, mlp.fc2, gamma1, gamma3, gamma2}`` (XCA blocks),
``cls_attn_blocks.{j}.{norm1, attn.{q, k, v, proj}, norm2, mlp.fc1, mlp.fc2, gamma1,
gamma2}``, ``norm``, ``head``.

The weights don't say ``tokens_norm`` (whether the class-attention blocks' second LayerNorm
runs over every token): it comes from the architecture (config.json's name or ``--arch``, read
from timm when installed, else timm's rule: every XCiT but the nano ones); a bare state dict
with no name takes timm's rule by its width and says so (``tokens_norm`` in the settings
changes it).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import torch
from torch import Tensor, nn

from vitviz.checkpoints.errors import CheckpointError
from vitviz.checkpoints.families.base import Conversion, Family, FamilyInfo, Source
from vitviz.checkpoints.families.common import (
    block_indices,
    check_depth,
    timm_crop,
    timm_mlp_ratio,
)
from vitviz.checkpoints.families.timm_library import timm_reference
from vitviz.checkpoints.families.timm_names import timm_version
from vitviz.checkpoints.library_check import Reference
from vitviz.kinds.timm_family import (
    refuse_model_args,
    said_image_size,
    settings_config,
    timm_conversion,
)
from vitviz.kinds.xcit.config import XcitConfig

LOOKS_LIKE = "a timm XCiT"
# timm's default_cfg of every XCiT: ImageNet mean and std, the whole image (crop_pct 1), bicubic.
XCIT_DEFAULTS = timm_crop(1.0)
_ARGS = {
    "img_size", "num_classes", "in_chans", "pretrained", "patch_size", "embed_dim", "depth",
    "num_heads", "mlp_ratio", "qkv_bias", "eta", "cls_attn_layers", "tokens_norm",
    "drop_rate", "pos_drop_rate", "proj_drop_rate", "attn_drop_rate", "drop_path_rate",
}  # fmt: skip
_FIELDS = frozenset(f.name for f in dataclasses.fields(XcitConfig))
_SIZES = {128: "nano", 192: "tiny", 384: "small", 512: "medium", 768: "large"}


def xcit_blocks(model: nn.Module) -> list[nn.Module]:
    """timm's XCiT's attention blocks in vitviz's order: its ``blocks`` (cross-covariance
    attention, (B, heads, d, d)), then its class-attention ``cls_attn_blocks``."""
    return [*model.blocks, *model.cls_attn_blocks]


LIBRARY_MODEL = timm_reference(blocks=xcit_blocks)  # timm's Xcit, read over both kinds of block


def detect(source: Source) -> bool:
    s = source.state
    return "blocks.0.attn.temperature" in s and any(k.startswith("cls_attn_blocks.") for k in s)


def _renamed(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """timm's (or the official) names -> XcitModel's: blocks -> xca_blocks, cls_attn_blocks ->
    blocks, pos_embeder -> pos_embed, a fused class-attention qkv split into q, k, v."""
    out: dict[str, Tensor] = {}
    for key in list(state):
        value = state.pop(key)
        new = re.sub(r"^blocks\.", "xca_blocks.", key)
        new = re.sub(r"^cls_attn_blocks\.", "blocks.", new)
        new = re.sub(r"^pos_embeder\.", "pos_embed.", new)
        m = re.match(r"^(blocks\.\d+\.attn\.)qkv\.(weight|bias)$", new)
        if m:
            for name, part in zip("qkv", value.chunk(3, dim=0), strict=True):
                out[f"{m.group(1)}{name}.{m.group(2)}"] = part
            continue
        out[new] = value
    return out


def _tokens_norm(name: str | None, dim: int, args: dict[str, Any]) -> tuple[bool, str | None]:
    """(tokens_norm, a note when it was assumed)."""
    if "tokens_norm" in args:
        return bool(args["tokens_norm"]), None
    if name and timm_version() is not None:
        try:
            import timm

            with torch.device("meta"):
                model = timm.create_model(name, pretrained=False)
            return bool(model.cls_attn_blocks[0].tokens_norm), None
        except Exception:  # noqa: BLE001 - an unknown name: timm's rule below
            pass
    if name:
        return "nano" not in name, None
    value = dim != 128
    return value, (
        f"tokens_norm {value} assumed (timm's XCiT of width {dim}; every XCiT but the nano ones "
        "normalises every token in its class-attention blocks); set tokens_norm to change it"
    )


def convert(source: Source) -> Conversion:
    cfg = source.timm_config or {}
    args: dict[str, Any] = dict(cfg.get("model_args") or {})
    pretrained: dict[str, Any] = dict(cfg.get("pretrained_cfg") or {})
    refuse_model_args(source, args, _ARGS, "XCiT", pos_embed=True)
    state = _renamed(source.state)
    try:
        D = state["cls_token"].shape[-1]
        stem = block_indices(state, r"patch_embed\.proj\.(\d+)\.0\.weight$")
        first = state["patch_embed.proj.0.0.weight"]
        xca = check_depth(source, block_indices(state, r"xca_blocks\.(\d+)\.norm1\.weight$"))
        ca = check_depth(source, block_indices(state, r"blocks\.(\d+)\.norm1\.weight$"))
        heads = state["xca_blocks.0.attn.temperature"].shape[0]
        hidden = state["xca_blocks.0.mlp.fc1.weight"].shape[0]
        ca_hidden = state["blocks.0.mlp.fc1.weight"].shape[0]
        pos_hidden = state["pos_embed.token_projection.weight"].shape[1] // 2
    except KeyError as exc:
        raise CheckpointError(
            f"{source.name} looks like {LOOKS_LIKE}, but {exc} is missing."
        ) from exc
    if hidden != ca_hidden:
        raise CheckpointError(
            f"{source.name}: its class-attention MLPs ({ca_hidden}) and XCA MLPs ({hidden}) "
            "differ in width; vitviz's XCiT has one MLP width."
        )
    user = dict(source.user)
    arch = user.pop("arch", None)
    name = arch or cfg.get("architecture")
    patch = 2 ** len(stem)
    recognised = None
    if not name and D in _SIZES:
        recognised = f"xcit_{_SIZES[D]}_{xca}_p{patch}_224"
    tokens_norm, assumed = _tokens_norm(name or None, D, args)
    notes = ["timm XCiT: LayerNorm eps 1e-6, GELU and the CLS head, as timm builds every XCiT"]
    if assumed and "tokens_norm" not in user:
        notes.append(assumed)
    size = said_image_size(args, pretrained)
    if size is None:
        m = re.search(r"_(\d+)$", str(name or ""))
        size = int(m.group(1)) if m else 224
        if not m and "image_size" not in user:
            notes.append(
                f"image size {size} assumed (an XCiT's positions are computed for any grid; "
                f"set image_size in {source.sidecar_name} for the size it was trained at)"
            )
    inferred: dict[str, Any] = dict(
        image_size=size, patch_size=patch, in_channels=first.shape[1], dim=D, heads=heads,
        depth=ca, xca_depth=xca, mlp_hidden_dim=hidden, pos_hidden=pos_hidden,
        qkv_bias="xca_blocks.0.attn.qkv.bias" in state, tokens_norm=tokens_norm,
        num_classes=state["head.weight"].shape[0] if "head.weight" in state else 0,
        norm_eps=1e-6, activation="gelu",
    )  # fmt: skip
    config = settings_config(source, user, inferred, XcitConfig, _FIELDS, ("an XCiT", "XCiT"))
    conversion = timm_conversion(
        source,
        family="timm-xcit",
        kind="xcit",
        config=config,
        state=state,
        num_classes=config.num_classes,
        defaults=XCIT_DEFAULTS,
        notes=notes,
    )
    if recognised:
        notes.append(f"recognised as timm's {recognised} by its width, depth and patch")
    named = name or recognised
    given, words, why = _library_args(config)
    if isinstance(named, str) and named.startswith("xcit_"):  # timm's own model checks ours
        given = {**({} if arch else args), **given}
        conversion.reference = Reference(
            "timm", named, given, words, unexpressible=why, how=LIBRARY_MODEL
        )
    elif not named:  # no name: timm's Xcit built with every size the file has
        conversion.reference = Reference(
            "timm", "xcit_nano_12_p16_224", given, words, shown_as="Xcit", unexpressible=why,
            how=LIBRARY_MODEL,
        )  # fmt: skip
    return conversion


TIMM_POS_HIDDEN = 32  # timm's Fourier position encoding: 32 frequencies per axis


def _library_args(config: Any) -> tuple[dict[str, Any], str, str]:
    """timm's Xcit keywords for the sizes the file's tensors show (the check builds the file's
    model, not the name's defaults), the words its note says them with, and why timm can't
    build it ("" when it can)."""
    if config.pos_hidden != TIMM_POS_HIDDEN:
        return (
            {},
            "",
            (
                f"timm's Xcit has {TIMM_POS_HIDDEN} position frequencies per axis (this file's: "
                f"{config.pos_hidden})"
            ),
        )
    args = {
        "patch_size": config.patch_size,
        "embed_dim": config.dim,
        "depth": config.xca_depth,
        "cls_attn_layers": config.depth,
        "num_heads": config.heads,
        "mlp_ratio": timm_mlp_ratio(config.dim, config.hidden_dim),
        "qkv_bias": config.qkv_bias,
        "tokens_norm": config.tokens_norm,
    }
    words = f"width {config.dim}, {config.xca_depth} + {config.depth} blocks, {config.heads} heads"
    return args, words, ""


FAMILY = Family(
    "timm-xcit",
    detect,
    convert,
    info=FamilyInfo(
        label="timm XCiT",
        names="xcit_nano_* … xcit_large_*",
        forms="state dict (.pth, .safetensors); timm folder",
        parts=(
            "cross-covariance attention (between channels)",
            "local patch interaction (3×3 depthwise convs)",
            "LayerScale",
            "class-attention blocks (the token maps)",
            "Fourier position encoding",
            "convolutional patch embedding with BatchNorm",
            "CLS token",
        ),
    ),
)
