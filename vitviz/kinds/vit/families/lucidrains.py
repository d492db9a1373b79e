"""State dicts of lucidrains' vit-pytorch ``ViT`` (and tutorials copying it):

- ``to_patch_embedding``: Rearrange ``b c (h p1) (w p2) -> b (h w) (p1 p2 c)``, LayerNorm,
  Linear, LayerNorm; ``cls_token``, ``pos_embedding``;
- ``transformer.layers.N.0``: attention (``norm``, ``to_qkv`` without bias, ``to_out.0``);
- ``transformer.layers.N.1``: feed-forward (``net.0`` LayerNorm, ``net.1``, ``net.4`` Linears);
- ``transformer.norm``, ``mlp_head``.

Older versions' ``PreNorm`` (``.norm`` + ``.fn.``) and ``mlp_head = LayerNorm + Linear`` are read
too. ``dim_head`` may differ from dim / heads (vitviz's ``attn_head_dim``); pooling is "cls"
unless the sidecar says ``"global_pool": "avg"`` (vit-pytorch's "mean" averages every token,
CLS included).

The patch Linear takes channels·p·p values: channels and p come from the sidecar's in_channels or
patch_size, else from its image_size and the position table, else 3 (RGB) or 1 (grayscale,
vit-pytorch's ``channels=1``, e.g. MNIST), whichever fits (``common.patch_channels``).
"""

from __future__ import annotations

import re
from typing import Any

import torch
from torch import Tensor

from vitviz.checkpoints.errors import CheckpointError
from vitviz.checkpoints.families.base import Conversion, Family, FamilyInfo, Source
from vitviz.checkpoints.families.common import (
    Taker,
    ask,
    assumed_imagenet_preprocessing,
    block_indices,
    check_depth,
    finish,
    grid_from_table,
    patch_channels,
)

LOOKS_LIKE = "a vit-pytorch (lucidrains) ViT"
_PATCH = "to_patch_embedding."


def _natural(key: str) -> list[Any]:
    return [int(x) if x.isdigit() else x for x in re.split(r"(\d+)", key)]


def detect(source: Source) -> bool:
    s = source.state
    return any(k.startswith(_PATCH) for k in s) and any(k.endswith("to_qkv.weight") for k in s)


def _params(t: Taker, prefix: str, ndim: int) -> list[str]:
    """Weight keys under ``prefix`` with ``ndim`` dimensions, in definition (natural) order."""
    keys = [
        k
        for k in t.state
        if k.startswith(prefix) and k.endswith("weight") and t.state[k].ndim == ndim
    ]
    return sorted(keys, key=_natural)


def _move(t: Taker, key: str, out: dict[str, Tensor], name: str, bias: bool = True) -> None:
    out[name + ".weight"] = t.take(key)
    if bias:
        out[name + ".bias"] = t.take(key[: -len("weight")] + "bias")


def convert(source: Source) -> Conversion:
    t = Taker(source, LOOKS_LIKE)
    notes: list[str] = []
    depth = check_depth(source, block_indices(t.state, r"transformer\.layers\.(\d+)\.0\."))
    linears = _params(t, _PATCH, 2)
    if len(linears) != 1:
        raise CheckpointError(
            f"{source.name}: expected one Linear in to_patch_embedding, found {len(linears)}."
        )
    D, patch_dim = t.state[linears[0]].shape
    pos_key = "pos_embedding" if "pos_embedding" in t else None
    has_cls = "cls_token" in t
    table = t.state[pos_key] if pos_key is not None else None
    num_patches = table.shape[-2] - has_cls if table is not None and table.ndim >= 2 else None
    C, p, channel_note = patch_channels(source, patch_dim, num_patches, LOOKS_LIKE)
    if channel_note:
        notes.append(channel_note)
    inner = (
        t.state[
            next(
                k
                for k in t.state
                if k.endswith("0.to_qkv.weight") or k.endswith("0.fn.to_qkv.weight")
            )
        ].shape[0]
        // 3
    )
    inferred: dict[str, Any] = dict(
        dim=D,
        depth=depth,
        patch_size=p,
        in_channels=C,
        patch_embed="linear",
        qkv_bias=False,
        norm_eps=1e-5,
        activation="gelu",
        global_pool="token",
    )
    if num_patches is not None:
        grid = grid_from_table(num_patches)
        if grid is not None:
            inferred["image_size"] = (grid[0] * p, grid[1] * p)
    ask(source, LOOKS_LIKE, {"heads": 8, "image_size": 32}, inferred)
    heads = int(source.user["heads"])
    if inner % heads:
        raise CheckpointError(
            f"{source.name}: the attention width {inner} is not divisible by heads {heads}."
        )
    if inner != D or D % heads:
        inferred["attn_head_dim"] = inner // heads

    out: dict[str, Tensor] = {}
    norms = _params(t, _PATCH, 1)
    lin_pos = _natural(linears[0])
    for key in norms:  # LayerNorms before the Linear (over patch_dim) and after it (over dim)
        after = _natural(key) > lin_pos
        _move(t, key, out, "patch_embed.norm" if after else "patch_embed.norm_pre")
        inferred["patch_norm_post" if after else "patch_norm_pre"] = True
    _move(t, linears[0], out, "patch_embed.proj")
    if has_cls:
        out["cls_token"] = t.take("cls_token")
    inferred["class_token"] = has_cls
    if pos_key is not None:
        out["pos_embed"] = t.take(pos_key)
    else:
        inferred["pos_embed"] = "none"
    for i in range(depth):
        _take_layer(t, f"transformer.layers.{i}.", f"blocks.{i}.", out, D, notes if i == 0 else [])
    inferred["mlp_hidden_dim"] = out["blocks.0.mlp.fc1.weight"].shape[0]
    _take_head(t, out, inferred, notes)
    t.refuse_leftovers()
    if (
        not has_cls
        or inferred.get("global_pool") == "avg"
        or source.user.get("global_pool") == "avg"
    ):
        inferred["global_pool"] = "avg"
        inferred["pool_include_prefix"] = True
    notes.append(
        f"pooling: {'mean of every token' if inferred['global_pool'] == 'avg' else 'CLS'}"
        f" (vit-pytorch's pool={'mean' if inferred['global_pool'] == 'avg' else 'cls'});"
        f" set global_pool in {source.sidecar_name} if yours differs"
    )
    prep = assumed_imagenet_preprocessing(source, notes, C)
    return finish(
        source,
        family="vit-pytorch",
        looks_like=LOOKS_LIKE,
        inferred=inferred,
        required={"heads": 8, "image_size": 32},
        state=out,
        class_names=None,
        preprocessing=prep,
        notes=notes,
    )


def _take_layer(t: Taker, a: str, b: str, out: dict[str, Tensor], D: int, notes: list[str]) -> None:
    """transformer.layers.N.{0 attention, 1 feed-forward} -> blocks.N."""
    attn, ff = a + "0.", a + "1."
    norms = _params(t, attn, 1)
    if len(norms) != 1:
        raise CheckpointError(
            f"{t.source.name}: expected one LayerNorm in {attn}, found {len(norms)}."
        )
    _move(t, norms[0], out, b + "norm1")
    qkv = [k for k in _params(t, attn, 2) if k.endswith("to_qkv.weight")]
    _move(t, qkv[0], out, b + "attn.qkv", bias=False)
    if t.maybe(qkv[0][: -len("weight")] + "bias") is not None:
        raise CheckpointError(f"{t.source.name}: to_qkv with a bias is not vit-pytorch's layout.")
    proj = _params(t, attn, 2)
    if proj:
        _move(t, proj[0], out, b + "attn.proj")
    else:  # project_out=False (one head of width dim): the output projection is the identity
        inner = out[b + "attn.qkv.weight"].shape[0] // 3
        out[b + "attn.proj.weight"] = torch.eye(D, inner)
        out[b + "attn.proj.bias"] = torch.zeros(D)
        notes.append("no to_out projection (one head as wide as dim): identity used")
    ff_norms, ff_linears = _params(t, ff, 1), _params(t, ff, 2)
    if len(ff_norms) != 1 or len(ff_linears) != 2:
        raise CheckpointError(f"{t.source.name}: expected a LayerNorm and two Linears in {ff}.")
    _move(t, ff_norms[0], out, b + "norm2")
    _move(t, ff_linears[0], out, b + "mlp.fc1")
    _move(t, ff_linears[1], out, b + "mlp.fc2")


def _take_head(
    t: Taker, out: dict[str, Tensor], inferred: dict[str, Any], notes: list[str]
) -> None:
    """transformer.norm and/or mlp_head (Linear, or LayerNorm + Linear)."""
    final = "transformer.norm.weight" in t
    head_norms, head_linears = _params(t, "mlp_head", 1), _params(t, "mlp_head", 2)
    if final and head_norms:
        raise CheckpointError(
            f"{t.source.name}: a LayerNorm in both transformer.norm and "
            f"mlp_head is not vit-pytorch's layout."
        )
    if final:
        _move(t, "transformer.norm.weight", out, "norm")
    elif head_norms:  # LayerNorm on the pooled token: the final norm for CLS, fc_norm for mean
        pooled_mean = (
            inferred.get("global_pool") == "avg"
            or t.source.user.get("global_pool") == "avg"
            or not inferred.get("class_token", True)
        )
        _move(t, head_norms[0], out, "fc_norm" if pooled_mean else "norm")
        inferred["fc_norm"] = pooled_mean
        notes.append("mlp_head's LayerNorm (on the pooled token) used as the final norm")
    inferred["final_norm"] = final or bool(head_norms)
    inferred["num_classes"] = 0
    if head_linears:
        _move(t, head_linears[0], out, "head")
        inferred["num_classes"] = out["head.weight"].shape[0]


FAMILY = Family(
    "vit-pytorch",
    detect,
    convert,
    info=FamilyInfo(
        label="lucidrains vit-pytorch ViT",
        names="vit_pytorch.ViT and tutorials copying it",
        forms="state dict (.pth, .safetensors), with a JSON sidecar for what it can't say",
        parts=(
            "attention (any head width)",
            "pre-norm blocks",
            "GELU MLP",
            "learnt position table",
            "CLS token",
            "CLS or mean pooling",
            "LayerNorm + Linear patch embedding",
        ),
    ),
)
