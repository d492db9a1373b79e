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

import torch
from torch import Tensor, nn

from vitviz.checkpoints.errors import CheckpointError
from vitviz.checkpoints.families.base import Conversion, Family, FamilyInfo, Source
from vitviz.checkpoints.families.common import Taker
from vitviz.checkpoints.families.hf_library import pooled_or_token, transformers_reference
from vitviz.checkpoints.labels import names_from_id2label
from vitviz.checkpoints.library_check import Reference
from vitviz.kinds.pyramid.families.common import finish_pyramid, hf_pyramid_preprocessing

LOOKS_LIKE = "a Hugging Face PVT v2"
_STEM = "encoder.layers.0.patch_embedding.proj.weight"
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


def _base(state: dict[str, Tensor]) -> str | None:
    key = next((k for k in state if k.endswith(_STEM)), None)
    return None if key is None else key[: -len(_STEM)]


def detect(source: Source) -> bool:
    cfg = source.hf_config
    if cfg is not None and cfg.get("model_type") != "pvt_v2":
        return False
    base = _base(source.state)
    return base is not None and f"{base}encoder.layers.0.blocks.0.attention.query.weight" in (
        source.state
    )


def _per_stage(cfg: dict[str, Any], key: str, stages: int, where: str) -> list[Any]:
    value = cfg.get(key)
    if isinstance(value, (list, tuple)) and len(value) >= stages:
        return list(value[:stages])
    raise CheckpointError(f"{where}: config.json's {key} {value!r} is not one value per stage.")


def _same_after_first(values: list[int], name: str, where: str) -> None:
    if len(set(values[1:])) > 1:
        raise CheckpointError(
            f"{where}: {name} {values} differ between later stages; vitviz's PVT v2 has one "
            "downsampling for every stage after the first."
        )


def convert(source: Source) -> Conversion:
    cfg: dict[str, Any] = dict(source.hf_config or {})
    if not cfg:
        raise CheckpointError(
            f"{source.name} looks like {LOOKS_LIKE}, but its config.json (head counts, eps, "
            "strides) is not beside it; open the folder transformers saved."
        )
    t = Taker(source, LOOKS_LIKE)
    base = _base(t.state) or ""
    enc = base + "encoder.layers."
    rx = re.compile(re.escape(enc) + r"(\d+)\.blocks\.(\d+)\.layer_norm_1\.weight$")
    found: dict[int, set[int]] = {}
    for key in t.state:
        m = rx.match(key)
        if m:
            found.setdefault(int(m.group(1)), set()).add(int(m.group(2)))
    stages = sorted(found)
    if stages != list(range(len(stages))) or any(
        sorted(found[s]) != list(range(len(found[s]))) for s in stages
    ):
        raise CheckpointError(
            f"{source.name}: the PVT v2 stages and blocks are not numbered 0..n-1."
        )
    out: dict[str, Tensor] = {}
    for s in stages:
        embed = "patch_embed." if s == 0 else f"stages.{s}.downsample."
        for kind in ("weight", "bias"):
            out[f"{embed}proj.{kind}"] = t.take(f"{enc}{s}.patch_embedding.proj.{kind}")
            out[f"{embed}norm.{kind}"] = t.take(f"{enc}{s}.patch_embedding.layer_norm.{kind}")
            out[f"stages.{s}.norm.{kind}"] = t.take(f"{enc}{s}.layer_norm.{kind}")
        for j in sorted(found[s]):
            old, new = f"{enc}{s}.blocks.{j}.", f"stages.{s}.blocks.{j}."
            for ours, theirs in _BLOCK.items():
                for kind in ("weight", "bias"):
                    tensor = t.maybe(f"{old}{theirs}.{kind}")
                    if tensor is not None:
                        out[f"{new}{ours}.{kind}"] = tensor
            for kind in ("weight", "bias"):
                k, v = (
                    t.maybe(f"{old}attention.key.{kind}"),
                    t.maybe(f"{old}attention.value.{kind}"),
                )
                if k is not None and v is not None:
                    out[f"{new}attn.kv.{kind}"] = torch.cat([k, v])  # timm's fused kv
    num_classes = 0
    if "classifier.weight" in t:
        out["head.weight"] = t.take("classifier.weight")
        out["head.bias"] = t.take("classifier.bias")
        num_classes = int(out["head.weight"].shape[0])
    t.refuse_leftovers()
    S = len(stages)
    where = source.name
    act = cfg.get("hidden_act", "gelu")
    if act != "gelu":
        raise CheckpointError(f"{where}: hidden_act {act!r} is not supported (PVT v2 uses gelu).")
    kernels = [int(v) for v in _per_stage(cfg, "patch_sizes", S, where)]
    strides = [int(v) for v in _per_stage(cfg, "strides", S, where)]
    _same_after_first(kernels, "patch_sizes", where)
    _same_after_first(strides, "strides", where)
    linear = bool(cfg.get("linear_attention", False))
    ratios = [float(v) for v in _per_stage(cfg, "mlp_ratios", S, where)]
    dims = [int(out[f"stages.{s}.blocks.0.norm1.weight"].shape[0]) for s in stages]
    eps = float(cfg.get("layer_norm_eps", 1e-6))
    stem = out["patch_embed.proj.weight"]
    size = cfg.get("image_size", 224)
    image = (size, size) if isinstance(size, int) else (int(size[0]), int(size[1]))
    inferred = dict(
        image_size=image,
        patch_size=strides[0],
        in_channels=int(stem.shape[1]),
        num_classes=num_classes,
        dims=tuple(dims),
        depths=tuple(len(found[s]) for s in stages),
        heads=tuple(int(h) for h in _per_stage(cfg, "num_attention_heads", S, where)),
        sr_ratios=tuple(1 if linear else int(r) for r in _per_stage(cfg, "sr_ratios", S, where)),
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
    prep, prep_notes = hf_pyramid_preprocessing(source, image, 2, notes)
    conversion = finish_pyramid(
        source,
        family="huggingface-pvt-v2",
        inferred=inferred,
        state=out,
        class_names=names_from_id2label(cfg.get("id2label"), num_classes),
        preprocessing=prep,
        notes=notes + prep_notes,
    )
    arch = (cfg.get("architectures") or [""])[0]
    conversion.reference = Reference(
        "transformers", str(arch), {"model_type": "pvt_v2"}, how=LIBRARY_MODEL
    )
    return conversion


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
