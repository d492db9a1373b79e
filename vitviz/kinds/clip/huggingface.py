"""Hugging Face ``CLIPModel`` folders (config.json with model_type "clip", the weights, the
tokenizer files, preprocessor_config.json) -> a ``ClipImageModel``.

A ``CLIPVisionModel`` / ``CLIPVisionModelWithProjection`` folder (model_type
"clip_vision_model") opens as an image tower alone: no prompts, its attention and features. A
``CLIPForImageClassification`` opens as a ViT with its classifier (``hf_classifiers``).

Image tower (``vision_model.*``) -> vitviz's ViT names: the class embedding is the CLS token,
the patch convolution has no bias (a zero bias is added), ``pre_layrnorm`` is ``norm_pre``,
q/k/v are fused into ``qkv``, ``post_layernorm`` is the final norm (the CLS token is read after
it, as Hugging Face reads its pooled output). ``visual_projection`` and ``logit_scale`` form the
prompt head; ``text_model.*`` + ``text_projection`` the text tower.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from vitviz.blocks import ViTConfig
from vitviz.checkpoints.errors import CheckpointError
from vitviz.checkpoints.families.base import Conversion, Family, FamilyInfo, Source
from vitviz.kinds.clip.hf_classifiers import classifier_conversion, drop_unread, has_classifier
from vitviz.kinds.clip.hf_towers import (
    activation,
    encoder_depth,
    folder_of,
    lacks_prefix,
    restore_prefix,
    take_encoder,
    tower_conversion,
)
from vitviz.kinds.clip.network import ClipConfig
from vitviz.kinds.clip.text import hf_text_config, hf_text_state

# CLIPImageProcessor's defaults (OpenAI's): resize the short side to 224, centre-crop 224.
CLIP_PROCESSOR: dict[str, Any] = {
    "do_resize": True,
    "size": {"shortest_edge": 224},
    "resample": 3,
    "do_center_crop": True,
    "crop_size": {"height": 224, "width": 224},
    "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711],
}
_PROBE = "vision_model.embeddings.class_embedding"


MODEL_TYPES = ("clip", "clip_vision_model")  # CLIPModel; CLIPVisionModel (+WithProjection)


def _unprefixed(source: Source) -> bool:
    """A CLIPVisionModel saved by transformers 5: its keys lack ``vision_model.``."""
    return lacks_prefix(source, MODEL_TYPES[1], "embeddings.class_embedding")


def detect(source: Source) -> bool:
    cfg = source.hf_config
    if _unprefixed(source) or has_classifier(source, MODEL_TYPES[0]):
        return True
    if cfg is not None:
        return cfg.get("model_type") in MODEL_TYPES and _PROBE in source.state
    return _PROBE in source.state and "visual_projection.weight" in source.state


def vision_config(cfg: dict[str, Any], state: dict[str, Tensor]) -> ViTConfig:
    alone = cfg.get("model_type") == MODEL_TYPES[1]  # an image tower's own config
    vision = cfg if alone else cfg.get("vision_config") or {}
    conv = state["vision_model.embeddings.patch_embedding.weight"]  # (D, C, p, p)
    D, C, p = int(conv.shape[0]), int(conv.shape[1]), int(conv.shape[-1])
    depth = encoder_depth(state)
    table = int(state["vision_model.embeddings.position_embedding.weight"].shape[0]) - 1
    side = round(table**0.5) * p
    return ViTConfig(
        image_size=(side, side),
        patch_size=p,
        in_channels=C,
        num_classes=0,
        dim=D,
        depth=depth,
        heads=int(vision.get("num_attention_heads", max(1, D // 64))),
        mlp_hidden_dim=int(state["vision_model.encoder.layers.0.mlp.fc1.weight"].shape[0]),
        pre_norm=True,
        norm_eps=float(vision.get("layer_norm_eps", 1e-5)),
        activation=activation(str(vision.get("hidden_act", "quick_gelu")), "image tower"),
    )


def _vision_state(state: dict[str, Tensor], depth: int) -> dict[str, Tensor]:
    """``vision_model.*`` + the head under vitviz's names (popped from ``state``)."""
    e = "vision_model.embeddings."
    conv = state.pop(e + "patch_embedding.weight")
    out = {
        "cls_token": state.pop(e + "class_embedding").reshape(1, 1, -1),
        "pos_embed": state.pop(e + "position_embedding.weight")[None],
        "patch_embed.proj.weight": conv,
        "patch_embed.proj.bias": torch.zeros(conv.shape[0], dtype=conv.dtype),
        "norm_pre.weight": state.pop("vision_model.pre_layrnorm.weight"),
        "norm_pre.bias": state.pop("vision_model.pre_layrnorm.bias"),
        "norm.weight": state.pop("vision_model.post_layernorm.weight"),
        "norm.bias": state.pop("vision_model.post_layernorm.bias"),
    }
    # CLIPVisionModel has no projection: the features themselves (an exact identity)
    norm = out["norm.weight"]
    identity = torch.eye(norm.shape[0], dtype=norm.dtype)
    out["head.projection.weight"] = state.pop("visual_projection.weight", identity)
    out["head.logit_scale"] = state.pop("logit_scale", torch.tensor(0.0))
    state.pop(e + "position_ids", None)
    take_encoder(state, depth, out)
    return out


def _classifier(source: Source) -> Conversion:
    """A CLIPForImageClassification: the mean of the patch tokens *before* the final norm (which
    only the pooled CLS output reads), then the classifier."""
    cfg = source.hf_config or {}
    state, notes = source.state, []
    v, e = "vision_model.", "vision_model.embeddings."
    try:
        fields = vision_config(cfg, state).to_dict()
        conv = state.pop(e + "patch_embedding.weight")
        out = {
            "cls_token": state.pop(e + "class_embedding").reshape(1, 1, -1),
            "pos_embed": state.pop(e + "position_embedding.weight")[None],
            "patch_embed.proj.weight": conv,
            "patch_embed.proj.bias": conv.new_zeros(conv.shape[0]),
            "norm_pre.weight": state.pop(v + "pre_layrnorm.weight"),
            "norm_pre.bias": state.pop(v + "pre_layrnorm.bias"),
        }
        state.pop(e + "position_ids", None)
        take_encoder(state, fields["depth"], out)
    except KeyError as exc:
        raise CheckpointError(f"{source.name}: a CLIP checkpoint without {exc}") from exc
    drop_unread(state, v + "post_layernorm.", "the final norm, read by the CLS output", notes)
    notes.append("the classifier reads the mean of the patch tokens before the final norm")
    side = {"height": fields["image_size"][0], "width": fields["image_size"][1]}
    proc = {**CLIP_PROCESSOR, "size": {"shortest_edge": side["height"]}, "crop_size": side}
    return classifier_conversion(source, "clip", {**fields, "final_norm": False}, out, proc, notes)


def convert(source: Source) -> Conversion:
    if has_classifier(source, MODEL_TYPES[0]):
        return _classifier(source)
    cfg = source.hf_config or {}
    state = source.state
    if _unprefixed(source):
        restore_prefix(state)
    try:
        vit = vision_config(cfg, state)
        out = _vision_state(state, vit.depth)
        embed_dim = int(out["head.projection.weight"].shape[0])
        text = None
        if "text_projection.weight" in state:
            text_cfg = dict(cfg.get("text_config") or {})
            text = hf_text_config(text_cfg, embed_dim)
            out.update({f"text.{k}": v for k, v in hf_text_state(state, text.depth).items()})
    except KeyError as exc:
        raise CheckpointError(f"{source.name}: a CLIP checkpoint without {exc}") from exc
    notes = []
    proc = source.preprocessor
    if proc is None:  # CLIP's processor at the tower's own input size
        side = {"height": vit.image_size[0], "width": vit.image_size[1]}
        proc = {**CLIP_PROCESSOR, "size": {"shortest_edge": min(vit.image_size)}, "crop_size": side}
        notes.append(f"{source.preprocessor_found}: CLIP's image processor's defaults are used")
    folder = folder_of(source)
    config = ClipConfig(
        vit=vit,
        embed_dim=embed_dim,
        text=text,
        tokenizer=None if folder is None or text is None else str(folder),
    )
    return tower_conversion(source, "huggingface-clip", config, out, proc, notes)


FAMILY = Family(
    "huggingface-clip",
    detect,
    convert,
    info=FamilyInfo(
        label="Hugging Face transformers CLIP",
        names="CLIPModel, CLIPVisionModel, CLIPVisionModelWithProjection",
        forms="save_pretrained folder with its tokenizer files",
        parts=(
            "attention",
            "pre-norm blocks",
            "QuickGELU or GELU MLP",
            "a LayerNorm before the blocks",
            "CLS token",
            "projection to the joint space",
            "cosine prompt head (logit_scale)",
            "Conv2d patch embedding",
        ),
    ),
)
