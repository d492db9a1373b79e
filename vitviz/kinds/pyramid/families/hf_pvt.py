"""Hugging Face transformers PVT v1 folders: ``PvtForImageClassification`` and ``PvtModel``
(config.json with ``model_type`` "pvt" + model.safetensors, preprocessor_config.json).

Keys: ``[pvt.]encoder.patch_embeddings.{s}.{projection, layer_norm, position_embeddings}`` (the
stem for s = 0, the patch embedding before stage s otherwise; ``cls_token`` in the last),
``…encoder.block.{s}.{j}.{layer_norm_1, attention.self.{query, key, value, sequence_reduction,
layer_norm}, attention.output.dense, layer_norm_2, mlp.{dense1, dense2}}``,
``…encoder.layer_norm``, ``classifier``. Key and value are fused into vitviz's one ``kv``.
transformers' patch embedding is a Conv2d of kernel ``strides[s]`` and stride
``patch_sizes[s]``, no padding; every norm's eps is ``layer_norm_eps``. Its position tables
are resized bilinearly to the grid an image gives, which fails at any grid but the trained one:
vitviz prepares images at the trained size and refuses another (``PyramidViT.embed_positions``).
"""

from __future__ import annotations

import re
from typing import Any

from torch import Tensor, nn

from vitviz.checkpoints.errors import CheckpointError
from vitviz.checkpoints.families.base import Conversion, Family, FamilyInfo, Source
from vitviz.checkpoints.families.common import Taker
from vitviz.checkpoints.families.hf_library import transformers_reference
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

LOOKS_LIKE = "a Hugging Face PVT v1"
_QUERY = "encoder.block.0.0.attention.self.query.weight"
_ONE = "PVT v1 has one patch embedding"
_BLOCK = {  # ours -> theirs, under stages.{s}.blocks.{j}. / encoder.block.{s}.{j}.
    "norm1": "layer_norm_1",
    "attn.q": "attention.self.query",
    "attn.sr": "attention.self.sequence_reduction",
    "attn.norm": "attention.self.layer_norm",
    "attn.proj": "attention.output.dense",
    "norm2": "layer_norm_2",
    "mlp.fc1": "mlp.dense1",
    "mlp.fc2": "mlp.dense2",
}


def cls_logits(model: nn.Module, out: Any) -> Tensor:
    """transformers' PVT v1 logits; its base model's: the final-normed CLS token, (B, C)."""
    logits = getattr(out, "logits", None)
    return logits if logits is not None else out.last_hidden_state[:, 0]


LIBRARY_MODEL = transformers_reference(logits=cls_logits)  # transformers' Pvt


def detect(source: Source) -> bool:
    cfg = source.hf_config
    if cfg is not None and cfg.get("model_type") != "pvt":
        return False
    return base_of(source.state, _QUERY) is not None


def _take_state(t: Taker, enc: str, found: dict[int, list[int]]) -> dict[str, Tensor]:
    """transformers' tensors at vitviz's places (its key and value fused into ``kv``)."""
    out: dict[str, Tensor] = {}
    last = len(found) - 1
    for s, blocks in found.items():
        embed = "patch_embed." if s == 0 else f"stages.{s}.downsample."
        old = f"{enc}patch_embeddings.{s}."
        for kind in ("weight", "bias"):
            out[f"{embed}proj.{kind}"] = t.take(f"{old}projection.{kind}")
            out[f"{embed}norm.{kind}"] = t.take(f"{old}layer_norm.{kind}")
        out[f"stages.{s}.pos_embed"] = t.take(f"{old}position_embeddings")
        if s == last:
            out[f"stages.{s}.cls_token"] = t.take(f"{old}cls_token")
        for j in blocks:
            old, new = f"{enc}block.{s}.{j}.", f"stages.{s}.blocks.{j}."
            take_renamed(t, old, new, _BLOCK, out)
            a = f"{old}attention.self."
            take_kv(t, f"{a}key", f"{a}value", f"{new}attn.kv", out)
    for kind in ("weight", "bias"):
        out[f"stages.{last}.norm.{kind}"] = t.take(f"{enc}layer_norm.{kind}")
    return out


def convert(source: Source) -> Conversion:
    cfg = hf_config_of(source, LOOKS_LIKE, "head counts, eps, strides")
    where = source.name
    t = Taker(source, LOOKS_LIKE)
    enc = (base_of(t.state, _QUERY) or "") + "encoder."
    pattern = re.escape(enc) + r"block\.(\d+)\.(\d+)\.layer_norm_1\.weight$"
    found = stage_blocks(t.state, pattern, where, "PVT v1 stages and blocks")
    out = _take_state(t, enc, found)
    num_classes = take_classifier(t, "head", out)
    t.refuse_leftovers()
    S = len(found)
    refuse_activation(cfg, where, "PVT v1")
    kernels = [int(v) for v in per_stage(cfg, "strides", S, where)]  # its conv's kernel
    strides = [int(v) for v in per_stage(cfg, "patch_sizes", S, where)]  # and stride
    same_after_first(kernels, "strides", where, _ONE)
    same_after_first(strides, "patch_sizes", where, _ONE)
    ratios = [int(r) for r in per_stage(cfg, "sequence_reduction_ratios", S, where)]
    if ratios[-1] != 1:
        raise CheckpointError(
            f"{where}: sequence_reduction_ratios {ratios} reduce the last stage, whose CLS token "
            "a reduction can't read (transformers can't run it either)."
        )
    eps = float(cfg.get("layer_norm_eps", 1e-6))
    image = hf_image_size(cfg, 224)
    inferred = dict(
        image_size=image,
        patch_size=strides[0],
        in_channels=int(out["patch_embed.proj.weight"].shape[1]),
        num_classes=num_classes,
        dims=tuple(int(out[f"stages.{s}.blocks.0.norm1.weight"].shape[0]) for s in found),
        depths=tuple(len(found[s]) for s in found),
        heads=tuple(int(h) for h in per_stage(cfg, "num_attention_heads", S, where)),
        sr_ratios=tuple(ratios),
        mlp_hidden_dims=tuple(
            int(out[f"stages.{s}.blocks.0.mlp.fc1.weight"].shape[0]) for s in found
        ),
        qkv_bias=bool(cfg.get("qkv_bias", True)),
        stem_kernel=kernels[0],
        down_kernel=kernels[1] if S > 1 else 2,
        down_stride=strides[1] if S > 1 else 2,
        norm_eps=eps,
        embed_eps=eps,
        scale_after=True,  # transformers divides q·kᵀ by √d
        embed_overlap=False,
        mlp_dwconv=False,
        stage_norms=False,
        pos_embed=True,
        cls_last=True,
    )
    notes: list[str] = []
    return hf_pyramid_conversion(
        source,
        cfg,
        family="huggingface-pvt",
        model_type="pvt",
        image=image,
        resample=2,
        inferred=inferred,
        state=out,
        num_classes=num_classes,
        notes=notes,
        how=LIBRARY_MODEL,
    )


FAMILY = Family(
    "huggingface-pvt",
    detect,
    convert,
    info=FamilyInfo(
        label="Hugging Face transformers PVT v1",
        names="PvtForImageClassification, PvtModel",
        forms="save_pretrained folder",
        parts=(
            "non-overlapping Conv2d patch embedding per stage",
            "a learned position table per stage (at the trained grid)",
            "spatial-reduction attention (strided conv + LayerNorm)",
            "pre-norm blocks, plain MLP",
            "a CLS token in the last stage only",
            "the head reads the final-normed CLS",
        ),
    ),
)
