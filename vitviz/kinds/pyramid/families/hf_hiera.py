"""Hugging Face transformers Hiera folders: ``HieraForImageClassification`` and ``HieraModel``
(config.json with ``model_type`` "hiera" + model.safetensors, preprocessor_config.json).

transformers' Hiera is timm's architecture under other names, so it maps onto vitviz's
``HieraViT`` key for key: ``[hiera.]embeddings.patch_embeddings.projection`` ->
``patch_embed.proj``,
``…embeddings.position_embeddings`` (1, N, D) -> ``pos_embed``, ``…encoder.stages.{s}.layers.{j}.
{layernorm_before, proj, attn.qkv, attn.proj, layernorm_after, mlp.fc1, mlp.fc2}`` -> ``blocks.{i}.
{norm1, proj, attn.qkv, attn.proj, norm2, mlp.fc1, mlp.fc2}`` (i counting the layers over the
stages), ``…pooler.layernorm`` -> ``head.norm``, ``classifier`` -> ``head.fc``. Its tokens run in
timm's unrolled order (the same ``unroll`` schedule), its queries and residual max-pool the same
slabs, and its pooler is the LayerNorm of the mean token, as timm's head.

config.json says the heads, the q-stride, the mask unit, ``masked_unit_attention``, the stem's
stride and padding, ``layer_norm_eps`` (every norm's), the activation and the image size. What
vitviz's Hiera can't compute is refused: fewer query-pooling stages than stage steps
(``num_query_pool``), a mask unit other than q-stride ** (stages − 1), an activation other than
GELU, and a stage with mask-unit attention after a global one (transformers' first block of such
a stage attends within mask units, timm's and vitviz's globally). ``HieraForPreTraining`` (MAE)
and ``HieraBackbone`` are not classifiers nor pooled models and are refused by name.
"""

from __future__ import annotations

import re
from typing import Any

from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle

from vitviz.checkpoints.errors import CheckpointError
from vitviz.checkpoints.families.base import Conversion, Family, FamilyInfo, Source
from vitviz.checkpoints.families.common import Taker
from vitviz.checkpoints.families.hf_library import transformers_reference
from vitviz.kinds.pyramid.families.hf_common import (
    base_of,
    hf_config_of,
    hf_image_size,
    hf_pyramid_conversion,
    refuse_activation,
    stage_blocks,
    take_classifier,
    take_renamed,
)
from vitviz.kinds.pyramid.hiera_config import HieraConfig

LOOKS_LIKE = "a Hugging Face Hiera"
_STEM = "embeddings.patch_embeddings.projection.weight"
_LAYER = {  # ours -> theirs, under blocks.{i}. / encoder.stages.{s}.layers.{j}.
    "norm1": "layernorm_before",
    "proj": "proj",
    "attn.qkv": "attn.qkv",
    "attn.proj": "attn.proj",
    "norm2": "layernorm_after",
    "mlp.fc1": "mlp.fc1",
    "mlp.fc2": "mlp.fc2",
}
_NOT_SHOWN = {
    "HieraForPreTraining": "its MAE pre-training model (masked units, a pixel decoder)",
    "HieraBackbone": "a backbone of feature maps with no pooled output or classifier",
}


def layer_probabilities(model: nn.Module, out: list[Tensor]) -> list[RemovableHandle]:
    """Forward hooks on each transformers Hiera attention appending the probabilities it
    returns, every layer's (its outputs keep a stage's last), in timm's layout:
    (B, heads, units, t_q, t_k) within mask units, else (B, heads, N_q, N_k) (its one "unit" of
    global attention dropped)."""

    def hook_of(a: nn.Module) -> Any:
        def hook(_m: nn.Module, _inputs: tuple[Tensor, ...], output: tuple[Tensor, Any]) -> None:
            probs = output[1]
            if probs is not None:
                out.append(probs if a.use_mask_unit_attn else probs.squeeze(2))

        return hook

    return [
        m.register_forward_hook(hook_of(m))
        for m in model.modules()
        if hasattr(m, "use_mask_unit_attn")
    ]


LIBRARY_MODEL = transformers_reference(hooks=layer_probabilities)  # transformers' Hiera


def detect(source: Source) -> bool:
    cfg = source.hf_config
    if cfg is not None and cfg.get("model_type") != "hiera":
        return False
    base = base_of(source.state, _STEM)
    return base is not None and f"{base}encoder.stages.0.layers.0.attn.qkv.weight" in source.state


def _pair(cfg: dict[str, Any], key: str, default: int, where: str) -> int:
    """A square 2-D setting (``patch_stride`` (4, 4)) as one int; refused if not square."""
    value = cfg.get(key, default)
    values = [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)] * 2
    if len(values) != 2 or values[0] != values[1]:
        raise CheckpointError(f"{where}: config.json's {key} {value!r} is not square; vitviz's "
                              "Hiera needs square ones.")  # fmt: skip
    return values[0]


def _refusals(cfg: dict[str, Any], stages: int, where: str) -> list[bool]:
    """config.json's choices vitviz's Hiera computes differently -> one-line refusals; else
    the per-stage mask-unit flags (timm's meaning: the first block of a stage attends as the
    stage before it)."""
    arch = str((cfg.get("architectures") or [""])[0])
    if arch in _NOT_SHOWN:
        raise CheckpointError(f"{where}: transformers' {arch} is {_NOT_SHOWN[arch]}; vitviz "
                              "opens HieraForImageClassification and HieraModel.")  # fmt: skip
    refuse_activation(cfg, where, "Hiera")
    pools = int(cfg.get("num_query_pool", stages - 1))
    if pools != stages - 1:
        raise CheckpointError(
            f"{where}: num_query_pool {pools} of {stages - 1} stage steps; vitviz's Hiera pools "
            "its queries at every stage."
        )
    flags = [bool(v) for v in cfg.get("masked_unit_attention", [True, True, False, False])]
    if len(flags) < stages:
        raise CheckpointError(f"{where}: masked_unit_attention {flags} is not one per stage.")
    flags = flags[:stages]
    late = [s for s in range(1, stages) if flags[s] and not flags[s - 1]]
    if late:
        raise CheckpointError(
            f"{where}: stage {late[0]} attends within mask units after a global stage; "
            "transformers' first block of it does too, timm's (vitviz's) globally: refused."
        )
    return flags


def convert(source: Source) -> Conversion:
    cfg = hf_config_of(source, LOOKS_LIKE, "heads, mask units, q-stride")
    where = source.name
    t = Taker(source, LOOKS_LIKE)
    base = base_of(t.state, _STEM) or ""
    enc = base + "encoder.stages."
    pattern = re.escape(enc) + r"(\d+)\.layers\.(\d+)\.layernorm_before\.weight$"
    found = stage_blocks(t.state, pattern, where, "Hiera stages and layers")
    stages = sorted(found)
    S = len(stages)
    flags = _refusals(cfg, S, where)
    out: dict[str, Any] = {}
    emb = base + "embeddings."
    for kind in ("weight", "bias"):
        out[f"patch_embed.proj.{kind}"] = t.take(f"{emb}patch_embeddings.projection.{kind}")
    out["pos_embed"] = t.take(f"{emb}position_embeddings")
    i = 0
    for s in stages:
        for j in found[s]:
            take_renamed(t, f"{enc}{s}.layers.{j}.", f"blocks.{i}.", _LAYER, out)
            i += 1
    for kind in ("weight", "bias"):
        out[f"head.norm.{kind}"] = t.take(f"{base}pooler.layernorm.{kind}")
    num_classes = take_classifier(t, "head.fc", out)
    t.refuse_leftovers()
    firsts = [sum(len(found[r]) for r in range(s)) for s in stages]
    dims = [int(out[f"blocks.{b}.norm2.weight"].shape[0]) for b in firsts]
    q = _pair(cfg, "query_stride", 2, where)
    stem = out["patch_embed.proj.weight"]
    image = hf_image_size(cfg, [224, 224])
    unit = cfg.get("masked_unit_size", [8, 8])
    inferred = dict(
        image_size=image,
        in_channels=int(stem.shape[1]),
        num_classes=num_classes,
        dims=tuple(dims),
        depths=tuple(len(found[s]) for s in stages),
        heads=tuple(int(h) for h in (cfg.get("num_heads") or [])[:S]),
        mlp_hidden_dims=tuple(int(out[f"blocks.{b}.mlp.fc1.weight"].shape[0]) for b in firsts),
        mask_unit_attn=tuple(flags),
        mask_unit=(int(unit[0]), int(unit[1])),
        q_stride=(q, q),
        patch_kernel=int(stem.shape[-1]),
        patch_stride=_pair(cfg, "patch_stride", 4, where),
        patch_padding=_pair(cfg, "patch_padding", 3, where),
        norm_eps=float(cfg.get("layer_norm_eps", 1e-6)),
        expand_proj=True,  # transformers' widening block always has its proj Linear
    )
    notes: list[str] = []
    return hf_pyramid_conversion(
        source,
        cfg,
        family="huggingface-hiera",
        model_type="hiera",
        image=image,
        resample=3,
        inferred=inferred,
        state=out,
        num_classes=num_classes,
        notes=notes,
        how=LIBRARY_MODEL,
        config_cls=HieraConfig,
    )


FAMILY = Family(
    "huggingface-hiera",
    detect,
    convert,
    info=FamilyInfo(
        label="Hugging Face transformers Hiera",
        names="HieraForImageClassification, HieraModel",
        forms="save_pretrained folder",
        parts=(
            "Conv2d patch embedding (kernel 7, stride 4)",
            "absolute position table",
            "mask-unit (windowed) attention in the first stages, global after",
            "queries and residual max-pooled 2×2 at each stage's first block",
            "pre-norm blocks",
            "LayerNorm of the mean token into the head",
        ),
    ),
)
