"""Plain state dicts of tutorial-style ViTs built on PyTorch's own attention:

- the pre-norm model with ``nn.MultiheadAttention`` in each block (``<blocks>.N.<attn>.
  in_proj_weight`` / ``out_proj``, two LayerNorms, a two-Linear MLP);
- models built on ``nn.TransformerEncoderLayer`` (``<encoder>.layers.N.self_attn``, ``linear1/2``,
  ``norm1/2``): post-norm and ReLU unless built with ``norm_first=True`` / another activation.

Blocks are found by their attention; inside a block LayerNorms and Linears are told apart by
shape (and name order). Outside: the patch embedding (Conv2d, or a Linear over flattened
patches), CLS token, position table, final LayerNorm and head. What the weights can't say
(heads; for nn.TransformerEncoderLayer norm_first and activation; the order of a Linear patch
embedding's inputs) comes from the sidecar. Input channels: a Conv2d's weight says them; a Linear's
are read as for vit-pytorch (``common.patch_channels``).
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
    check_depth,
    finish,
    grid_from_table,
    patch_channels,
)

MHA_LOOKS_LIKE = "a model built on nn.MultiheadAttention"
TEL_LOOKS_LIKE = "a model built on nn.TransformerEncoderLayer"
_ATTN = re.compile(r"^(?P<stack>(?:.*\.)?)(?P<index>\d+)\.(?P<attn>(?:[\w.]*\.)?)in_proj_weight$")
_CLS_NAMES = ("cls_token", "class_token", "cls", "cls_embedding", "class_embedding")
_POS_NAMES = (
    "pos_embed",
    "pos_embedding",
    "position_embedding",
    "position_embeddings",
    "positional_embedding",
    "pos_emb",
    "pos_encoding",
)
PATCH_ORDERS = ("c p1 p2", "p1 p2 c")


def _natural(key: str) -> list[Any]:
    return [int(x) if x.isdigit() else x for x in re.split(r"(\d+)", key)]


def _blocks(state: dict[str, Tensor]) -> tuple[str, dict[int, str], dict[int, str]]:
    """(stack prefix, {N: block prefix}, {N: attention prefix}) of the MHA blocks."""
    stacks: dict[str, dict[int, tuple[str, str]]] = {}
    for key in state:
        m = _ATTN.match(key)
        if m:
            block = f"{m['stack']}{m['index']}."
            stacks.setdefault(m["stack"], {})[int(m["index"])] = (block, block + m["attn"])
    stack = max(stacks, key=lambda s: len(stacks[s]))
    found = stacks[stack]
    return stack, {i: b for i, (b, _) in found.items()}, {i: a for i, (_, a) in found.items()}


def detect(source: Source) -> bool:
    return any(_ATTN.match(k) for k in source.state)


def _is_tel(t: Taker, blocks: dict[int, str], attns: dict[int, str]) -> bool:
    b, a = blocks[0], attns[0]
    return a == b + "self_attn." and all(
        f"{b}{n}.weight" in t for n in ("linear1", "linear2", "norm1", "norm2")
    )


def _take_block(t: Taker, b: str, a: str, out: dict[str, Tensor], o: str, D: int) -> None:
    """One block: attention by its MHA names, then LayerNorms / Linears by shape and order."""
    out[o + "attn.qkv.weight"] = t.take(a + "in_proj_weight")
    bias = t.maybe(a + "in_proj_bias")
    if bias is not None:
        out[o + "attn.qkv.bias"] = bias
    out[o + "attn.proj.weight"] = t.take(a + "out_proj.weight")
    out[o + "attn.proj.bias"] = t.take(a + "out_proj.bias")
    weights = sorted(
        (k for k in t.state if k.startswith(b) and k.endswith(".weight")), key=_natural
    )
    norms = [k for k in weights if t.state[k].ndim == 1]
    linears = [k for k in weights if t.state[k].ndim == 2]
    if len(norms) != 2 or len(linears) != 2:
        raise CheckpointError(
            f"{t.source.name}: block {b!r} has {len(norms)} LayerNorms and "
            f"{len(linears)} Linears besides its attention; vitviz's block has "
            f"2 and 2."
        )
    first, second = (t.state[k].shape for k in linears)
    if first[1] != D and second[1] == D:  # defined MLP-out first: put fc1 (dim -> hidden) first
        linears.reverse()
    for name, key in zip(("norm1", "norm2", "mlp.fc1", "mlp.fc2"), norms + linears, strict=True):
        stem = key[: -len("weight")]
        out[f"{o}{name}.weight"] = t.take(key)
        out[f"{o}{name}.bias"] = t.take(stem + "bias")


def _find(t: Taker, names: tuple[str, ...]) -> str | None:
    hits = [k for k in t.state if k.rsplit(".", 1)[-1] in names and t.state[k].ndim in (2, 3)]
    return hits[0] if len(hits) == 1 else None


def convert(source: Source) -> Conversion:
    notes: list[str] = []
    stack, blocks, attns = _blocks(source.state)
    tel = _is_tel(Taker(source, MHA_LOOKS_LIKE), blocks, attns)
    looks_like = TEL_LOOKS_LIKE if tel else MHA_LOOKS_LIKE
    t = Taker(source, looks_like)
    depth = check_depth(source, sorted(blocks))
    D = t.state[attns[0] + "in_proj_weight"].shape[1]
    patch_key, linear_patch = _patch_embed_key(t, looks_like, D, stack)
    cls_key, pos_key = _find(t, _CLS_NAMES), _find(t, _POS_NAMES)
    weight = t.state[patch_key]
    if linear_patch:
        num_patches = (
            t.state[pos_key].numel() // D - (cls_key is not None) if pos_key is not None else None
        )
        C, p, channel_note = patch_channels(source, weight.shape[1], num_patches, looks_like)
        if channel_note:
            notes.append(channel_note)
    else:  # Conv2d (D, C, p, p): the weights say both
        C, p = weight.shape[1], weight.shape[-1]
    inferred: dict[str, Any] = dict(
        dim=D,
        depth=depth,
        norm_eps=1e-5,
        patch_size=p,
        in_channels=C,
        class_token=cls_key is not None,
    )
    if pos_key is not None:
        grid = grid_from_table(t.state[pos_key].numel() // D - (cls_key is not None))
        if grid is not None:
            inferred["image_size"] = (grid[0] * p, grid[1] * p)  # type: ignore[operator]
            notes.append(
                f"image size {grid[0] * p}×{grid[1] * p} inferred from the square "  # type: ignore[operator]
                f"position table"
            )
    required: dict[str, Any] = {"heads": 4}
    if tel:
        required.update(norm_first=False, activation="relu")
        notes.append(
            "nn.TransformerEncoderLayer: norm placement and activation from the "
            "settings given (PyTorch's defaults are post-norm, ReLU)"
        )
    else:
        inferred.update(norm_first=True, activation="gelu")
        notes.append(
            "nn.MultiheadAttention blocks read as pre-norm with GELU; set norm_first / "
            f"activation in {source.sidecar_name} if yours differ"
        )
    required["image_size"] = 32
    if linear_patch:
        required["patch_order"] = "c p1 p2"
    ask(source, looks_like, required, inferred)

    out: dict[str, Tensor] = {}
    for i in range(depth):
        _take_block(t, blocks[i], attns[i], out, f"blocks.{i}.", D)
    inferred.update(
        qkv_bias="blocks.0.attn.qkv.bias" in out,
        mlp_hidden_dim=out["blocks.0.mlp.fc1.weight"].shape[0],
    )
    _take_patch_embed(t, source, patch_key, linear_patch, out, D, C, p, notes)  # type: ignore[arg-type]
    if cls_key is not None:
        out["cls_token"] = t.take(cls_key).reshape(1, 1, D)
    else:
        inferred["global_pool"] = "avg"
        notes.append("no class token: the head reads the mean of the patch tokens")
    if pos_key is not None:
        out["pos_embed"] = t.take(pos_key).reshape(1, -1, D)
    else:
        inferred["pos_embed"] = "none"
        notes.append("no position table found: the model runs without position embedding")
    _take_norm_and_head(t, out, inferred, D)
    t.refuse_leftovers()
    prep = assumed_imagenet_preprocessing(source, notes, C)
    return finish(
        source,
        family="tutorial-transformer-encoder" if tel else "tutorial-mha",
        looks_like=looks_like,
        inferred=inferred,
        required=required,
        state=out,
        class_names=None,
        preprocessing=prep,
        notes=notes,
    )


def _patch_embed_key(t: Taker, looks_like: str, D: int, stack: str) -> tuple[str, bool]:
    """The patch embedding's weight: a Conv2d (D, C, p, p), or a Linear (D, C·p·p)."""
    convs = [k for k, v in t.state.items() if v.ndim == 4 and v.shape[0] == D]
    linears = [
        k
        for k, v in t.state.items()
        if v.ndim == 2
        and v.shape[0] == D
        and v.shape[1] != D
        and not k.startswith(stack)
        and _could_be_patches(v.shape[1], t.source.user)
    ]
    if len(convs) == 1:
        return convs[0], False
    if not convs and len(linears) == 1:
        return linears[0], True
    raise CheckpointError(
        f"{t.source.name} looks like {looks_like}, but no single patch "
        f"embedding (a Conv2d, or a Linear to width {D}) was found."
    )


def _take_patch_embed(
    t: Taker,
    source: Source,
    key: str,
    linear: bool,
    out: dict[str, Tensor],
    D: int,
    C: int,
    p: int,
    notes: list[str],
) -> None:
    """-> vitviz's Conv2d patch embedding (a Linear over flattened patches is the same map)."""
    w = t.take(key)
    if linear:
        order = source.user["patch_order"]
        if order not in PATCH_ORDERS:
            raise CheckpointError(
                f"{source.name}: patch_order must be one of "
                f"{', '.join(PATCH_ORDERS)} (got {order!r})."
            )
        if order == "c p1 p2":
            w = w.reshape(D, C, p, p)
        else:
            w = w.reshape(D, p, p, C).permute(0, 3, 1, 2)
        notes.append(f"Linear patch embedding over ({order}) patches read as the equivalent Conv2d")
    out["patch_embed.proj.weight"] = w
    bias = t.maybe(key[: -len("weight")] + "bias")
    out["patch_embed.proj.bias"] = bias if bias is not None else torch.zeros(D, dtype=w.dtype)


def _patch_side(n: int, C: int) -> int | None:
    side = round((n / C) ** 0.5)
    return side if C * side * side == n else None


def _could_be_patches(n: int, user: dict[str, Any]) -> bool:
    """Whether a Linear taking ``n`` values could take flattened patches (C·p·p values, with
    C and p from the settings where given, else C 3 or 1)."""
    C, p = user.get("in_channels"), user.get("patch_size")
    if isinstance(p, int) and p > 0:
        return n % (p * p) == 0 and (not isinstance(C, int) or n == C * p * p)
    channels = [C] if isinstance(C, int) and C > 0 else [3, 1]
    return any(_patch_side(n, c) for c in channels)


def _take_norm_and_head(t: Taker, out: dict[str, Tensor], inferred: dict[str, Any], D: int) -> None:
    norms = [
        k for k, v in t.state.items() if k.endswith(".weight") and v.ndim == 1 and v.shape[0] == D
    ]
    if len(norms) > 1:
        raise CheckpointError(
            f"{t.source.name}: several LayerNorms outside the blocks "
            f"({', '.join(sorted(norms))}); vitviz's ViT has one final norm."
        )
    inferred["final_norm"] = bool(norms)
    if norms:
        stem = norms[0][: -len("weight")]
        out["norm.weight"] = t.take(norms[0])
        out["norm.bias"] = t.take(stem + "bias")
    heads = [
        k for k, v in t.state.items() if k.endswith(".weight") and v.ndim == 2 and v.shape[1] == D
    ]
    if len(heads) > 1:
        raise CheckpointError(
            f"{t.source.name}: several Linears could be the head ({', '.join(sorted(heads))})."
        )
    inferred["num_classes"] = 0
    if heads:
        out["head.weight"] = t.take(heads[0])
        out["head.bias"] = t.take(heads[0][: -len("weight")] + "bias")
        inferred["num_classes"] = out["head.weight"].shape[0]


FAMILY = Family(
    "tutorial",
    detect,
    convert,
    info=FamilyInfo(
        label="tutorial ViTs on PyTorch's own attention",
        names="nn.MultiheadAttention blocks, nn.TransformerEncoderLayer encoders",
        forms="state dict (.pth, .safetensors), with a JSON sidecar for what it can't say",
        parts=(
            "attention",
            "pre- or post-norm blocks",
            "GELU or ReLU MLP",
            "learnt position table",
            "CLS token",
            "Conv2d or Linear patch embedding",
        ),
    ),
)
