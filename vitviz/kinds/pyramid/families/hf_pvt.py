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

import torch
from torch import Tensor, nn

from vitviz.checkpoints.errors import CheckpointError
from vitviz.checkpoints.families.base import Conversion, Family, FamilyInfo, Source
from vitviz.checkpoints.families.common import Taker
from vitviz.checkpoints.families.hf_library import transformers_reference
from vitviz.checkpoints.labels import names_from_id2label
from vitviz.checkpoints.library_check import Reference
from vitviz.kinds.pyramid.families.common import finish_pyramid, hf_pyramid_preprocessing

LOOKS_LIKE = "a Hugging Face PVT v1"
_QUERY = "encoder.block.0.0.attention.self.query.weight"
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


def _base(state: dict[str, Tensor]) -> str | None:
    key = next((k for k in state if k.endswith(_QUERY)), None)
    return None if key is None else key[: -len(_QUERY)]


def detect(source: Source) -> bool:
    cfg = source.hf_config
    if cfg is not None and cfg.get("model_type") != "pvt":
        return False
    return _base(source.state) is not None


def _per_stage(cfg: dict[str, Any], key: str, stages: int, where: str) -> list[Any]:
    value = cfg.get(key)
    if isinstance(value, (list, tuple)) and len(value) >= stages:
        return list(value[:stages])
    raise CheckpointError(f"{where}: config.json's {key} {value!r} is not one value per stage.")


def _stages(t: Taker, enc: str, where: str) -> dict[int, list[int]]:
    """{stage: [block indices]} numbered 0..n-1, else CheckpointError."""
    rx = re.compile(re.escape(enc) + r"block\.(\d+)\.(\d+)\.layer_norm_1\.weight$")
    found: dict[int, set[int]] = {}
    for key in t.state:
        m = rx.match(key)
        if m:
            found.setdefault(int(m.group(1)), set()).add(int(m.group(2)))
    stages = sorted(found)
    if stages != list(range(len(stages))) or any(
        sorted(found[s]) != list(range(len(found[s]))) for s in stages
    ):
        raise CheckpointError(f"{where}: the PVT v1 stages and blocks are not numbered 0..n-1.")
    return {s: sorted(found[s]) for s in stages}


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
            for ours, theirs in _BLOCK.items():
                for kind in ("weight", "bias"):
                    tensor = t.maybe(f"{old}{theirs}.{kind}")
                    if tensor is not None:
                        out[f"{new}{ours}.{kind}"] = tensor
            for kind in ("weight", "bias"):
                k = t.maybe(f"{old}attention.self.key.{kind}")
                v = t.maybe(f"{old}attention.self.value.{kind}")
                if k is not None and v is not None:
                    out[f"{new}attn.kv.{kind}"] = torch.cat([k, v])
    for kind in ("weight", "bias"):
        out[f"stages.{last}.norm.{kind}"] = t.take(f"{enc}layer_norm.{kind}")
    return out


def _one_after_first(values: list[int], name: str, where: str) -> None:
    if len(set(values[1:])) > 1:
        raise CheckpointError(
            f"{where}: {name} {values} differ between later stages; vitviz's PVT v1 has one "
            "patch embedding for every stage after the first."
        )


def convert(source: Source) -> Conversion:
    cfg: dict[str, Any] = dict(source.hf_config or {})
    where = source.name
    if not cfg:
        raise CheckpointError(
            f"{where} looks like {LOOKS_LIKE}, but its config.json (head counts, eps, strides) "
            "is not beside it; open the folder transformers saved."
        )
    t = Taker(source, LOOKS_LIKE)
    enc = (_base(t.state) or "") + "encoder."
    found = _stages(t, enc, where)
    out = _take_state(t, enc, found)
    num_classes = 0
    if "classifier.weight" in t:
        out["head.weight"] = t.take("classifier.weight")
        out["head.bias"] = t.take("classifier.bias")
        num_classes = int(out["head.weight"].shape[0])
    t.refuse_leftovers()
    S = len(found)
    act = cfg.get("hidden_act", "gelu")
    if act != "gelu":
        raise CheckpointError(f"{where}: hidden_act {act!r} is not supported (PVT v1 uses gelu).")
    kernels = [int(v) for v in _per_stage(cfg, "strides", S, where)]  # its conv's kernel
    strides = [int(v) for v in _per_stage(cfg, "patch_sizes", S, where)]  # and stride
    _one_after_first(kernels, "strides", where)
    _one_after_first(strides, "patch_sizes", where)
    ratios = [int(r) for r in _per_stage(cfg, "sequence_reduction_ratios", S, where)]
    if ratios[-1] != 1:
        raise CheckpointError(
            f"{where}: sequence_reduction_ratios {ratios} reduce the last stage, whose CLS token "
            "a reduction can't read (transformers can't run it either)."
        )
    eps = float(cfg.get("layer_norm_eps", 1e-6))
    size = cfg.get("image_size", 224)
    image = (size, size) if isinstance(size, int) else (int(size[0]), int(size[1]))
    inferred = dict(
        image_size=image,
        patch_size=strides[0],
        in_channels=int(out["patch_embed.proj.weight"].shape[1]),
        num_classes=num_classes,
        dims=tuple(int(out[f"stages.{s}.blocks.0.norm1.weight"].shape[0]) for s in found),
        depths=tuple(len(found[s]) for s in found),
        heads=tuple(int(h) for h in _per_stage(cfg, "num_attention_heads", S, where)),
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
    prep, prep_notes = hf_pyramid_preprocessing(source, image, 2, notes)
    conversion = finish_pyramid(
        source,
        family="huggingface-pvt",
        inferred=inferred,
        state=out,
        class_names=names_from_id2label(cfg.get("id2label"), num_classes),
        preprocessing=prep,
        notes=notes + prep_notes,
    )
    arch = (cfg.get("architectures") or [""])[0]
    conversion.reference = Reference(
        "transformers", str(arch), {"model_type": "pvt"}, how=LIBRARY_MODEL
    )
    return conversion


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
