"""Hugging Face transformers PVT v2 folders: ``PvtV2ForImageClassification`` and ``PvtV2Model``
(config.json with ``model_type`` "pvt_v2" + model.safetensors, preprocessor_config.json).

Keys: ``[pvt_v2.]encoder.layers.{s}.patch_embedding.{proj, layer_norm}`` (the stem for s = 0,
the downsampling before stage s otherwise), ``…layers.{s}.blocks.{j}.{layer_norm_1,
attention.{query, key, value, spatial_reduction, layer_norm, proj}, layer_norm_2, mlp.{dense1,
dwconv.dwconv, dense2}}``, ``…layers.{s}.layer_norm``, ``classifier``. Key and value are fused
into timm's one ``kv``; every other tensor keeps its place. The head counts, eps
(``layer_norm_eps``, every norm's), kernels and strides (``patch_sizes``, ``strides``), the
activation and ``linear_attention`` come from config.json.
transformers' PVT v1 folders (``model_type`` "pvt") are ``hf_pvt``'s.
"""

from __future__ import annotations

import re
from typing import Any

from torch import Tensor, nn

from vitviz.checkpoints.families.base import Conversion, Family, FamilyInfo, Source
from vitviz.checkpoints.families.common import Taker
from vitviz.checkpoints.families.hf_library import pooled_or_token, transformers_reference
from vitviz.kinds.pyramid.families.hf_common import (
    base_of,
    hf_config_of,
    hf_image_size,
    hf_pyramid_conversion,
    per_stage,
    refuse_activation,
    same_after_first,
    stage_blocks,
    take_classifier,
    take_kv,
    take_renamed,
)

LOOKS_LIKE = "a Hugging Face PVT v2"
_STEM = "encoder.layers.0.patch_embedding.proj.weight"
_ONE = "PVT v2 has one downsampling"
_BLOCK = {  # ours -> theirs, under stages.{s}.blocks.{j}. / encoder.layers.{s}.blocks.{j}.
    "norm1": "layer_norm_1",
    "attn.q": "attention.query",
    "attn.sr": "attention.spatial_reduction",
    "attn.norm": "attention.layer_norm",
    "attn.proj": "attention.proj",
    "norm2": "layer_norm_2",
    "mlp.fc1": "mlp.dense1",
    "mlp.dwconv": "mlp.dwconv.dwconv",
    "mlp.fc2": "mlp.dense2",
}


def map_mean(model: nn.Module, out: Any) -> Tensor:
    """transformers' PVT v2 logits; its base model's: the mean of its last (B, C, H, W) map
    over the positions, (B, C)."""
    hidden = getattr(out, "last_hidden_state", None)
    if getattr(out, "logits", None) is None and hidden is not None and hidden.ndim == 4:
        return hidden.flatten(2).transpose(1, 2).mean(1)
    return pooled_or_token(model, out)


LIBRARY_MODEL = transformers_reference(logits=map_mean)  # transformers' PvtV2


def detect(source: Source) -> bool:
    cfg = source.hf_config
    if cfg is not None and cfg.get("model_type") != "pvt_v2":
        return False
    base = base_of(source.state, _STEM)
    return base is not None and f"{base}encoder.layers.0.blocks.0.attention.query.weight" in (
        source.state
    )


def convert(source: Source) -> Conversion:
    cfg = hf_config_of(source, LOOKS_LIKE, "head counts, eps, strides")
    where = source.name
    t = Taker(source, LOOKS_LIKE)
    enc = (base_of(t.state, _STEM) or "") + "encoder.layers."
    pattern = re.escape(enc) + r"(\d+)\.blocks\.(\d+)\.layer_norm_1\.weight$"
    found = stage_blocks(t.state, pattern, where, "PVT v2 stages and blocks")
    stages = sorted(found)
    out: dict[str, Tensor] = {}
    for s in stages:
        embed = "patch_embed." if s == 0 else f"stages.{s}.downsample."
        for kind in ("weight", "bias"):
            out[f"{embed}proj.{kind}"] = t.take(f"{enc}{s}.patch_embedding.proj.{kind}")
            out[f"{embed}norm.{kind}"] = t.take(f"{enc}{s}.patch_embedding.layer_norm.{kind}")
            out[f"stages.{s}.norm.{kind}"] = t.take(f"{enc}{s}.layer_norm.{kind}")
        for j in found[s]:
            old, new = f"{enc}{s}.blocks.{j}.", f"stages.{s}.blocks.{j}."
            take_renamed(t, old, new, _BLOCK, out)
            take_kv(t, f"{old}attention.key", f"{old}attention.value", f"{new}attn.kv", out)
    num_classes = take_classifier(t, "head", out)
    t.refuse_leftovers()
    S = len(stages)
    refuse_activation(cfg, where, "PVT v2")
    kernels = [int(v) for v in per_stage(cfg, "patch_sizes", S, where)]
    strides = [int(v) for v in per_stage(cfg, "strides", S, where)]
    same_after_first(kernels, "patch_sizes", where, _ONE)
    same_after_first(strides, "strides", where, _ONE)
    linear = bool(cfg.get("linear_attention", False))
    ratios = [float(v) for v in per_stage(cfg, "mlp_ratios", S, where)]
    dims = [int(out[f"stages.{s}.blocks.0.norm1.weight"].shape[0]) for s in stages]
    eps = float(cfg.get("layer_norm_eps", 1e-6))
    stem = out["patch_embed.proj.weight"]
    image = hf_image_size(cfg, 224)
    inferred = dict(
        image_size=image,
        patch_size=strides[0],
        in_channels=int(stem.shape[1]),
        num_classes=num_classes,
        dims=tuple(dims),
        depths=tuple(len(found[s]) for s in stages),
        heads=tuple(int(h) for h in per_stage(cfg, "num_attention_heads", S, where)),
        sr_ratios=tuple(1 if linear else int(r) for r in per_stage(cfg, "sr_ratios", S, where)),
        mlp_hidden_dims=tuple(
            int(out[f"stages.{s}.blocks.0.mlp.fc1.weight"].shape[0]) for s in stages
        ),
        linear=linear,
        qkv_bias=bool(cfg.get("qkv_bias", True)),
        stem_kernel=kernels[0],
        down_kernel=kernels[1] if S > 1 else 3,
        down_stride=strides[1] if S > 1 else 2,
        norm_eps=eps,
        embed_eps=eps,
        scale_after=True,  # transformers divides q·kᵀ by √d
    )
    notes = []
    if any(
        int(d * r) != h for d, r, h in zip(dims, ratios, inferred["mlp_hidden_dims"], strict=True)
    ):
        notes.append("the MLP widths are read from the weights (config.json's mlp_ratios differ)")
    return hf_pyramid_conversion(
        source,
        cfg,
        family="huggingface-pvt-v2",
        model_type="pvt_v2",
        image=image,
        resample=2,
        inferred=inferred,
        state=out,
        num_classes=num_classes,
        notes=notes,
        how=LIBRARY_MODEL,
    )


FAMILY = Family(
    "huggingface-pvt-v2",
    detect,
    convert,
    info=FamilyInfo(
        label="Hugging Face transformers PVT v2",
        names="PvtV2ForImageClassification, PvtV2Model",
        forms="save_pretrained folder",
        parts=(
            "overlapping Conv2d patch embedding per stage",
            "spatial-reduction attention (strided conv, or pooling)",
            "pre-norm blocks",
            "MLP with a depthwise 3×3 conv",
            "a LayerNorm per stage",
            "no position table",
            "mean pooling of the last stage",
        ),
    ),
)
