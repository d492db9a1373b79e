"""Hugging Face transformers Swin folders: SwinForImageClassification, SwinModel and their Swinv2
twins (config.json + model.safetensors or pytorch_model.bin, and preprocessor_config.json).

Saved key names (``swin.embeddings.{patch_embeddings.projection, norm}``,
``encoder.layers.{s}.blocks.{j}.{layernorm_before, attention.self.{query, key, value,
relative_position_bias_table}, attention.output.dense, layernorm_after, intermediate.dense,
output.dense}``, ``encoder.layers.{s}.downsample.{reduction, norm}`` (merging at the end of stage
s), ``layernorm``, ``classifier``) and transformers 5's in-memory names (``attention.q_proj``,
``attention.o_proj``, ``attention.relative_position_bias.relative_position_bias_table``,
``mlp.fc1``) are both read; query/key/value are fused into one qkv. Hugging Face pads the image to
whole patches, pads a map before rolling it and, when min(H, W) ≤ window, uses a square window of
min(H, W) without shift. Swinv2 blocks hold ``attention.self.logit_scale`` and
``attention.self.continuous_position_bias_mlp.{0, 2}``, a key without bias, and clamp the window
per axis; their window comes from config.json (``window_size``, ``pretrained_window_sizes``).
"""

from __future__ import annotations

import re
from typing import Any

import torch
from torch import Tensor

from vitviz.checkpoints.errors import CheckpointError
from vitviz.checkpoints.families.base import Conversion, Family, FamilyInfo, Source
from vitviz.checkpoints.families.common import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    Taker,
    ask,
    dropped,
    fuse_qkv,
)
from vitviz.checkpoints.labels import names_from_id2label
from vitviz.checkpoints.preprocessing import hf_preprocessing
from vitviz.kinds.swin.families.common import (
    check_numbering,
    finish_swin,
    infer_stages,
    per_stage,
    refuse_leftovers,
    stage_blocks,
)

LOOKS_LIKE = "a Hugging Face Swin"
_PATCH = "embeddings.patch_embeddings.projection.weight"
_TABLE = (
    "attention.self.relative_position_bias_table",
    "attention.relative_position_bias.relative_position_bias_table",
)
_CPB = "attention.self.continuous_position_bias_mlp."
_V2 = {
    "attn.logit_scale": "attention.self.logit_scale",
    "attn.cpb_mlp.0.weight": _CPB + "0.weight",
    "attn.cpb_mlp.0.bias": _CPB + "0.bias",
    "attn.cpb_mlp.2.weight": _CPB + "2.weight",
}
_ROLES = {
    "q": ("attention.self.query", "attention.q_proj"),
    "k": ("attention.self.key", "attention.k_proj"),
    "v": ("attention.self.value", "attention.v_proj"),
    "attn.proj": ("attention.output.dense", "attention.o_proj"),
    "norm1": ("layernorm_before",),
    "norm2": ("layernorm_after",),
    "mlp.fc1": ("intermediate.dense", "mlp.fc1"),
    "mlp.fc2": ("output.dense", "mlp.fc2"),
}
_ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "relu": "relu",
    "quick_gelu": "quick_gelu",
}


def _base(state: dict[str, Tensor]) -> str | None:
    key = next((k for k in state if k.endswith(_PATCH)), None)
    return None if key is None else key[: -len(_PATCH)]


def detect(source: Source) -> bool:
    base = _base(source.state)
    return base is not None and any(
        k.startswith(base + "encoder.layers.") and k.endswith((*_TABLE, _CPB + "0.weight"))
        for k in source.state
    )


def convert(source: Source) -> Conversion:
    cfg: dict[str, Any] = dict(source.hf_config or {})
    t = Taker(source, LOOKS_LIKE)
    out: dict[str, Tensor] = {}
    notes: list[str] = []
    base = _base(t.state) or ""
    e, enc = base + "embeddings.", base + "encoder.layers."
    if e + "position_embeddings" in t:
        raise CheckpointError(
            f"{source.name}: a Swin with absolute position embeddings is not supported."
        )
    gone = t.drop(
        [e + "mask_token"] + [k for k in t.state if k.endswith("relative_position_index")]
    )
    found = stage_blocks(
        t.state, re.escape(enc) + r"(\d+)\.blocks\.(\d+)\.layernorm_before\.weight$"
    )
    check_numbering(source, found, list(range(len(found))))
    qkv_bias = True
    for s, blocks in found.items():
        for j in blocks:
            old, new = f"{enc}{s}.blocks.{j}.", f"stages.{s}.blocks.{j}."
            w = {r: t.take(*(f"{old}{n}.weight" for n in names)) for r, names in _ROLES.items()}
            b = {r: t.maybe(*(f"{old}{n}.bias" for n in names)) for r, names in _ROLES.items()}
            out[new + "attn.qkv.weight"] = fuse_qkv(w.pop("q"), w.pop("k"), w.pop("v"))
            qkv = [b.pop(r) for r in ("q", "k", "v")]
            v2 = old + _V2["attn.logit_scale"] in t
            if v2 and qkv[0] is not None and qkv[2] is not None and qkv[1] is None:
                qkv[1] = torch.zeros_like(qkv[0])  # Swinv2's key has no bias
            qkv_bias = all(x is not None for x in qkv)
            if qkv_bias:
                out[new + "attn.qkv.bias"] = fuse_qkv(*qkv)  # type: ignore[arg-type]
            for role, weight in w.items():
                if b[role] is None:
                    raise CheckpointError(f"{source.name}: {old}{_ROLES[role][0]}.bias is missing.")
                out[f"{new}{role}.weight"], out[f"{new}{role}.bias"] = weight, b[role]  # type: ignore[assignment]
            if v2:
                for ours, theirs in _V2.items():
                    out[new + ours] = t.take(old + theirs)
            else:
                out[new + "attn.relative_position_bias_table"] = t.take(*(old + n for n in _TABLE))
        merge = f"{enc}{s}.downsample."
        if merge + "reduction.weight" in t:
            out[f"stages.{s + 1}.merge.reduction.weight"] = t.take(merge + "reduction.weight")
            out[f"stages.{s + 1}.merge.norm.weight"] = t.take(merge + "norm.weight")
            out[f"stages.{s + 1}.merge.norm.bias"] = t.take(merge + "norm.bias")
    out["patch_embed.proj.weight"] = patch = t.take(e + "patch_embeddings.projection.weight")
    out["patch_embed.proj.bias"] = t.take(e + "patch_embeddings.projection.bias")
    out["patch_embed.norm.weight"] = t.take(e + "norm.weight")
    out["patch_embed.norm.bias"] = t.take(e + "norm.bias")
    out["norm.weight"] = t.take(base + "layernorm.weight")
    out["norm.bias"] = t.take(base + "layernorm.bias")
    num_classes = 0
    if "classifier.weight" in t:
        out["head.weight"] = t.take("classifier.weight")
        out["head.bias"] = t.take("classifier.bias")
        num_classes = out["head.weight"].shape[0]
    refuse_leftovers(t)
    if gone:
        notes.append(dropped(gone, "masked-image pre-training token and computed indices"))

    act = cfg.get("hidden_act", "gelu")
    if act not in _ACTIVATIONS:
        raise CheckpointError(f"{source.name}: hidden_act {act!r} is not supported.")
    depths = [len(b) for b in found.values()]
    v2 = "stages.0.blocks.0.attn.logit_scale" in out
    windows = None
    if v2 and "window_sizes" not in source.user:
        if "window_size" not in cfg:
            ask(source, LOOKS_LIKE, {"window_sizes": [8] * len(depths)})
        windows = per_stage(cfg["window_size"], len(depths), "window_size", source.name)
    inferred = infer_stages(out, depths, windows, where=source.name)
    pws = cfg.get("pretrained_window_sizes")
    if v2 and isinstance(pws, (list, tuple)) and len(pws) >= len(depths):
        inferred["pretrained_window_sizes"] = tuple(int(v) for v in pws[: len(depths)])
    size = cfg.get("image_size", 224)
    inferred.update(
        image_size=size,
        patch_size=patch.shape[-1],
        in_channels=patch.shape[1],
        num_classes=num_classes,
        qkv_bias=qkv_bias,
        norm_eps=float(cfg.get("layer_norm_eps", 1e-5)),
        activation=_ACTIVATIONS[act],
        shift_first=False,
        window_clamp="axis" if v2 else "min",
        pad_image=True,
    )
    side = size if isinstance(size, int) else int(size[0])
    proc = source.preprocessor
    if proc is None:
        proc = {
            "do_resize": True,
            "size": {"height": side, "width": side},
            "resample": 3,
            "image_mean": IMAGENET_MEAN,
            "image_std": IMAGENET_STD,
        }
        notes.append(f"{source.preprocessor_found}: the Swin image processor's defaults are used")
    model_size = (size, size) if isinstance(size, int) else (int(size[0]), int(size[1]))
    prep, prep_notes = hf_preprocessing(proc, model_size)
    return finish_swin(
        source,
        family="huggingface-swinv2" if v2 else "huggingface-swin",
        inferred=inferred,
        state=out,
        class_names=names_from_id2label(cfg.get("id2label"), num_classes),
        preprocessing=prep,
        notes=notes + prep_notes,
    )


FAMILY = Family(
    "huggingface-swin",
    detect,
    convert,
    info=FamilyInfo(
        label="Hugging Face transformers Swin, Swin v2",
        names="SwinForImageClassification, SwinModel, Swinv2 twins",
        forms="save_pretrained folder",
        parts=(
            "(shifted) window attention with a relative position bias",
            "v2: cosine attention, continuous position bias, residual post-norm",
            "patch merging between stages",
            "mean pooling",
            "Conv2d patch embedding",
        ),
    ),
)
