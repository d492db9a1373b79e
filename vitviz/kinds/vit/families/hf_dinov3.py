"""Hugging Face transformers ``dinov3_vit`` folders (DINOv3ViTModel, DINOv3ViTBackbone's
weights): DINOv3's rotary positions (centred coordinates, rotate-half, ``rope_theta``), CLS and
register tokens, no position table, q/k/v separate (k without bias by default), LayerScale
``lambda1``, a GELU MLP (``up_proj``/``down_proj``) or a SiLU-gated one (``gate_proj``), the
final norm; the model's output is the normed CLS token (its ``pooler_output``).
"""

from __future__ import annotations

import re
from typing import Any

import torch
from torch import Tensor

from vitviz.checkpoints.errors import CheckpointError
from vitviz.checkpoints.families.base import Conversion, Family, FamilyInfo, Source
from vitviz.checkpoints.families.common import Taker, block_indices, check_depth, finish, fuse_qkv
from vitviz.checkpoints.families.hf_library import LIBRARY_MODEL
from vitviz.checkpoints.library_check import Reference
from vitviz.checkpoints.preprocessing import IMAGENET_MEAN, IMAGENET_STD, hf_preprocessing

LOOKS_LIKE = "a Hugging Face DINOv3 ViT"
MODEL_TYPE = "dinov3_vit"
PROCESSOR = {"do_resize": True, "size": {"height": 224, "width": 224}, "resample": 2,
             "image_mean": IMAGENET_MEAN, "image_std": IMAGENET_STD}  # fmt: skip


def detect(source: Source) -> bool:
    cfg = source.hf_config
    return cfg is not None and cfg.get("model_type") == MODEL_TYPE


def _prefix(state: dict[str, Tensor]) -> str:
    """'' (DINOv3ViTModel's saved names) or the shared prefix before ``embeddings.``."""
    key = next((k for k in state if k.endswith("embeddings.cls_token")), None)
    if key is None:
        raise CheckpointError("a DINOv3 folder without embeddings.cls_token")
    return key[: -len("embeddings.cls_token")]


def _refuse_settings(source: Source, cfg: dict[str, Any]) -> None:
    if cfg.get("use_gated_mlp") and cfg.get("hidden_act", "gelu") != "silu":
        raise CheckpointError(
            f"{source.name}: a gated MLP with {cfg.get('hidden_act')!r}, which vitviz does not "
            "model (its gated MLP is SwiGLU's SiLU)."
        )
    if not cfg.get("use_gated_mlp") and cfg.get("hidden_act", "gelu") != "gelu":
        raise CheckpointError(
            f"{source.name}: an MLP with {cfg.get('hidden_act')!r}, which vitviz does not model."
        )


def convert(source: Source) -> Conversion:
    cfg = dict(source.hf_config or {})
    _refuse_settings(source, cfg)
    t = Taker(source, LOOKS_LIKE)
    base = _prefix(t.state)
    e = base + "embeddings."
    out: dict[str, Tensor] = {}
    out["cls_token"] = t.take(e + "cls_token")
    registers = t.maybe(e + "register_tokens")
    if registers is not None and registers.shape[1]:
        out["reg_token"] = registers
    t.drop([e + "mask_token"])  # pre-training only
    out["patch_embed.proj.weight"] = patch = t.take(e + "patch_embeddings.weight")
    bias = t.maybe(e + "patch_embeddings.bias")
    out["patch_embed.proj.bias"] = bias if bias is not None else patch.new_zeros(patch.shape[0])
    D, C, p = int(patch.shape[0]), int(patch.shape[1]), int(patch.shape[-1])
    pattern = re.escape(base) + r"layer\.(\d+)\.norm1\.weight$"
    depth = check_depth(source, block_indices(t.state, pattern))
    gated = bool(cfg.get("use_gated_mlp"))
    qkv_bias = False
    for i in range(depth):
        s, o = f"{base}layer.{i}.", f"blocks.{i}."
        for a, b in (("norm1", "norm1"), ("norm2", "norm2"), ("attention.o_proj", "attn.proj")):
            out[f"{o}{b}.weight"] = t.take(f"{s}{a}.weight")
            out[f"{o}{b}.bias"] = t.take(f"{s}{a}.bias")
        q, k, v = (t.take(f"{s}attention.{n}_proj.weight") for n in "qkv")
        out[f"{o}attn.qkv.weight"] = fuse_qkv(q, k, v)
        biases = [t.maybe(f"{s}attention.{n}_proj.bias") for n in "qkv"]
        if any(b is not None for b in biases):
            qkv_bias = True
            zero = q.new_zeros(q.shape[0])
            out[f"{o}attn.qkv.bias"] = torch.cat([zero if b is None else b for b in biases])
        out[f"{o}ls1.gamma"] = t.take(f"{s}layer_scale1.lambda1")
        out[f"{o}ls2.gamma"] = t.take(f"{s}layer_scale2.lambda1")
        names = (("gate_proj", "fc1_g"), ("up_proj", "fc1_x")) if gated else (("up_proj", "fc1"),)
        for a, b in (*names, ("down_proj", "fc2")):
            out[f"{o}mlp.{b}.weight"] = t.take(f"{s}mlp.{a}.weight")
            mlp_bias = t.maybe(f"{s}mlp.{a}.bias")
            width = out[f"{o}mlp.{b}.weight"].shape[0]
            out[f"{o}mlp.{b}.bias"] = mlp_bias if mlp_bias is not None else q.new_zeros(width)
    for part in ("weight", "bias"):
        out[f"norm.{part}"] = t.take(f"{base}norm.{part}")
    t.refuse_leftovers()

    heads = int(cfg.get("num_attention_heads", 0)) or None
    size = cfg.get("image_size", 224)
    image = (size, size) if isinstance(size, int) else tuple(size)
    inferred: dict[str, Any] = dict(
        image_size=image, patch_size=p, in_channels=C, num_classes=0, dim=D, depth=depth,
        heads=heads, mlp_hidden_dim=int(out["blocks.0.mlp.fc2.weight"].shape[1]),
        qkv_bias=qkv_bias, pos_embed="none", num_register_tokens=0 if registers is None
        else int(registers.shape[1]), layer_scale_init=1.0, global_pool="token",
        norm_eps=float(cfg.get("layer_norm_eps", 1e-5)), activation="gelu", swiglu=gated,
        rope="dinov3", rope_half=True, rope_temperature=float(cfg.get("rope_theta", 100.0)),
    )  # fmt: skip
    notes = []
    proc = source.preprocessor
    if proc is None:
        proc = PROCESSOR
        notes.append(f"{source.preprocessor_found}: ImageNet mean/std at 224 assumed")
    prep, prep_notes = hf_preprocessing(proc, image)
    notes += prep_notes
    notes.append("the model's output is its normed CLS token (DINOv3ViTModel's pooler_output)")
    conversion = finish(
        source,
        family=f"huggingface-{MODEL_TYPE}",
        looks_like=LOOKS_LIKE,
        inferred=inferred,
        required={"heads": 6} if heads is None else {},
        state=out,
        class_names=None,
        preprocessing=prep,
        notes=notes,
    )
    conversion.reference = Reference(
        "transformers", "DINOv3ViTModel", {"model_type": MODEL_TYPE}, how=LIBRARY_MODEL
    )
    return conversion


FAMILY = Family(
    f"huggingface-{MODEL_TYPE}",
    detect,
    convert,
    info=FamilyInfo(
        label="Hugging Face transformers DINOv3",
        names="DINOv3ViTModel",
        forms="save_pretrained folder",
        parts=(
            "attention with DINOv3's rotary positions",
            "pre-norm blocks",
            "GELU or SiLU-gated MLP",
            "LayerScale",
            "CLS token, registers",
            "the normed CLS token",
            "Conv2d patch embedding",
        ),
    ),
)
