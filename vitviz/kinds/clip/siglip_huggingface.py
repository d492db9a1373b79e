"""Hugging Face ``SiglipModel`` folders (config.json with model_type "siglip", the weights,
tokenizer.json, preprocessor_config.json) -> a ``SiglipImageModel``; a ``SiglipVisionModel``
folder (model_type "siglip_vision_model") opens as an image tower alone: no prompts. A
``SiglipForImageClassification`` opens as a ViT with its classifier (``hf_classifiers``).

Image tower (``vision_model.*``) -> vitviz's ViT names: the patch convolution (with its bias),
the position table (patches only: there is no CLS), q/k/v fused into ``qkv``, ``post_layernorm``
as the final norm over every token; ``vision_model.head.*`` (probe, nn.MultiheadAttention's
packed in-projection and out_proj, layernorm, mlp) is the ``AttentionPool``; ``logit_scale`` and
``logit_bias`` the prompt head; ``text_model.*`` (its ``head``: the projection, with a bias) the
text tower, bidirectional.
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
from vitviz.kinds.clip.siglip import SiglipConfig
from vitviz.kinds.clip.text import TextConfig, hf_text_state

# SiglipImageProcessor's defaults: squash to 224 × 224 (bilinear), scale to [-1, 1].
SIGLIP_PROCESSOR: dict[str, Any] = {
    "do_resize": True,
    "size": {"height": 224, "width": 224},
    "resample": 2,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
}
_PROBE = "vision_model.head.probe"


MODEL_TYPES = ("siglip", "siglip_vision_model")  # SiglipModel; SiglipVisionModel


def _unprefixed(source: Source) -> bool:
    """A SiglipVisionModel saved by transformers 5: its keys lack ``vision_model.``."""
    return lacks_prefix(source, MODEL_TYPES[1], "head.probe")


def detect(source: Source) -> bool:
    cfg = source.hf_config
    if _unprefixed(source) or has_classifier(source, MODEL_TYPES[0]):
        return True
    return _PROBE in source.state and (cfg is None or cfg.get("model_type") in MODEL_TYPES)


def _get(cfg: dict[str, Any], name: str, default: object) -> Any:
    value = cfg.get(name, default)
    return default if value is None else value


def vision_config(vision: dict[str, Any], state: dict[str, Tensor]) -> ViTConfig:
    v = "vision_model."
    conv = state[v + "embeddings.patch_embedding.weight"]  # (D, C, p, p)
    D, C, p = int(conv.shape[0]), int(conv.shape[1]), int(conv.shape[-1])
    depth = encoder_depth(state)
    table = int(state[v + "embeddings.position_embedding.weight"].shape[0])
    side = round(table**0.5)
    if side * side != table:
        raise CheckpointError(f"a position table of {table} entries is not a square grid")
    return ViTConfig(
        image_size=(side * p, side * p),
        patch_size=p,
        in_channels=C,
        num_classes=0,
        dim=D,
        depth=depth,
        heads=int(_get(vision, "num_attention_heads", max(1, D // 64))),
        mlp_hidden_dim=int(state[v + "encoder.layers.0.mlp.fc1.weight"].shape[0]),
        class_token=False,
        global_pool="avg",  # unused: the MAP head pools
        norm_eps=float(_get(vision, "layer_norm_eps", 1e-6)),
        activation=activation(str(_get(vision, "hidden_act", "gelu_pytorch_tanh")), "image tower"),
    )


def tower_state(state: dict[str, Tensor], depth: int) -> dict[str, Tensor]:
    """``vision_model.*`` but its attention-pool head under vitviz's names (popped)."""
    v = "vision_model."
    e = v + "embeddings."
    out = {
        "pos_embed": state.pop(e + "position_embedding.weight")[None],
        "patch_embed.proj.weight": state.pop(e + "patch_embedding.weight"),
        "patch_embed.proj.bias": state.pop(e + "patch_embedding.bias"),
        "norm.weight": state.pop(v + "post_layernorm.weight"),
        "norm.bias": state.pop(v + "post_layernorm.bias"),
    }
    state.pop(e + "position_ids", None)
    take_encoder(state, depth, out)
    return out


def _vision_state(state: dict[str, Tensor], depth: int) -> dict[str, Tensor]:
    """``vision_model.*`` with its attention-pool head under vitviz's names (popped)."""
    h = "vision_model.head."
    out = {
        **tower_state(state, depth),
        "pool.probe": state.pop(h + "probe"),
        "pool.in_proj_weight": state.pop(h + "attention.in_proj_weight"),
        "pool.in_proj_bias": state.pop(h + "attention.in_proj_bias"),
    }
    for ours, theirs in (("out_proj", "attention.out_proj"), ("norm", "layernorm"),
                         ("fc1", "mlp.fc1"), ("fc2", "mlp.fc2")):  # fmt: skip
        for part in ("weight", "bias"):
            out[f"pool.{ours}.{part}"] = state.pop(f"{h}{theirs}.{part}")
    return out


def _text(cfg: dict[str, Any], state: dict[str, Tensor]) -> tuple[TextConfig, dict[str, Tensor]]:
    """The text tower's config and weights (``text_model.*``) under TextTower's names."""
    t = "text_model."
    depth = 1 + max(int(k.split(".")[3]) for k in state if k.startswith(t + "encoder.layers."))
    tokens = state[t + "embeddings.token_embedding.weight"]
    head = state[t + "head.weight"]  # (E, D)
    text = TextConfig(
        vocab_size=int(tokens.shape[0]),
        width=int(tokens.shape[1]),
        depth=depth,
        heads=int(_get(cfg, "num_attention_heads", 12)),
        mlp_hidden=int(state[t + "encoder.layers.0.mlp.fc1.weight"].shape[0]),
        context_length=int(state[t + "embeddings.position_embedding.weight"].shape[0]),
        embed_dim=int(head.shape[0]),
        end_id=int(_get(cfg, "eos_token_id", 1)),
        activation=activation(str(_get(cfg, "hidden_act", "gelu_pytorch_tanh")), "text tower"),
        eps=float(_get(cfg, "layer_norm_eps", 1e-6)),
        causal=False,
    )
    renamed = {**state, "text_projection.weight": head}  # CLIP's name for the projection
    weights = hf_text_state(renamed, depth)
    weights["projection.bias"] = state[t + "head.bias"]
    return text, weights


def _classifier(source: Source) -> Conversion:
    """A SiglipForImageClassification: the mean of the tokens after the final norm, then the
    classifier; the tower's attention-pool head (when it has one) is never read."""
    cfg = source.hf_config or {}
    state, notes = source.state, []
    try:
        fields = vision_config(dict(cfg.get("vision_config") or {}), state).to_dict()
        out = tower_state(state, fields["depth"])
    except KeyError as exc:
        raise CheckpointError(f"{source.name}: a SigLIP checkpoint without {exc}") from exc
    drop_unread(state, "vision_model.head.", "the tower's attention-pool head", notes)
    notes.append("the classifier reads the mean of the tokens after the final norm")
    side = fields["image_size"][0]
    proc = {**SIGLIP_PROCESSOR, "size": {"height": side, "width": side}}
    return classifier_conversion(source, "siglip", fields, out, proc, notes)


def convert(source: Source) -> Conversion:
    if has_classifier(source, MODEL_TYPES[0]):
        return _classifier(source)
    cfg = source.hf_config or {}
    state = source.state
    if _unprefixed(source):
        restore_prefix(state)
    alone = cfg.get("model_type") == MODEL_TYPES[1]  # an image tower alone: no prompts
    try:
        vit = vision_config(dict(cfg if alone else cfg.get("vision_config") or {}), state)
        out = _vision_state(state, vit.depth)
        out["head.logit_scale"] = state.pop("logit_scale", torch.zeros(())).reshape(())
        out["head.logit_bias"] = state.pop("logit_bias", torch.zeros(())).reshape(())
        text, pad_id = None, 1
        if "text_model.head.weight" in state:
            text_cfg = dict(cfg.get("text_config") or {})
            text, weights = _text(text_cfg, state)
            pad_id = int(_get(text_cfg, "pad_token_id", 1))
            out.update({f"text.{k}": w for k, w in weights.items()})
    except KeyError as exc:
        raise CheckpointError(f"{source.name}: a SigLIP checkpoint without {exc}") from exc
    if text is not None and text.embed_dim != vit.dim:
        raise CheckpointError(
            f"{source.name}: the text embedding ({text.embed_dim}) and the image embedding "
            f"({vit.dim}) differ in width"
        )
    notes = []
    proc = source.preprocessor
    if proc is None:
        side = vit.image_size[0]
        proc = {**SIGLIP_PROCESSOR, "size": {"height": side, "width": side}}
        notes.append(f"{source.preprocessor_found}: SigLIP's image processor's defaults are used")
    folder = folder_of(source)
    config = SiglipConfig(
        vit=vit,
        embed_dim=vit.dim,
        text=text,
        pad_id=pad_id,
        tokenizer=None if folder is None or text is None else str(folder),
    )
    return tower_conversion(source, "huggingface-siglip", config, out, proc, notes)


FAMILY = Family(
    "huggingface-siglip",
    detect,
    convert,
    info=FamilyInfo(
        label="Hugging Face transformers SigLIP",
        names="SiglipModel, SiglipVisionModel",
        forms="save_pretrained folder with tokenizer.json",
        parts=(
            "attention",
            "pre-norm blocks",
            "GELU (tanh) MLP",
            "learnt position table",
            "no CLS: an attention-pooling probe",
            "sigmoid prompt head (scale and bias)",
            "Conv2d patch embedding",
        ),
    ),
)
