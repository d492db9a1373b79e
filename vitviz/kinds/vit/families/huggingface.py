"""Hugging Face transformers folders: ViTForImageClassification, ViTModel, DeiT (with teacher),
Dinov2Model, Dinov2WithRegistersModel (config.json + model.safetensors or pytorch_model.bin, and
preprocessor_config.json).

Saved key names (``{vit,deit,dinov2,...}.embeddings.*``, ``encoder.layer.N.attention.attention.
{query,key,value}``, ``attention.output.dense``, ``intermediate.dense``, ``output.dense``,
``layernorm_before/after`` or ``norm1/2`` + ``layer_scale1/2.lambda1``) and transformers 5's
in-memory names (``layers.N.attention.q_proj``, ``mlp.fc1``, ...) are both read. The separate
query/key/value are fused into vitviz's one qkv.

Token layout: DINOv2 with registers puts the registers after CLS *after* adding the position
embedding (CLS has one, registers none): ``pos_embed_prefix = 1``.

BEiT and Data2Vec-vision: each layer's relative position bias table is read as it is; at a size
other than the config's (an image processor's crop, ``resize: "fit"``) vitviz's network
resamples it as transformers' model does (DESIGN §3), and the library check compares both there.
"""

from __future__ import annotations

import math
import re
from typing import Any

import torch
from torch import Tensor, nn

from vitviz.checkpoints.errors import CheckpointError
from vitviz.checkpoints.families.base import Conversion, Family, FamilyInfo, Source
from vitviz.checkpoints.families.common import (
    Taker,
    check_depth,
    dropped,
    example_heads,
    finish,
    fuse_qkv,
    grid_from_table,
    standard_heads,
)
from vitviz.checkpoints.families.hf_library import transformers_reference
from vitviz.checkpoints.labels import names_from_id2label
from vitviz.checkpoints.library_check import Reference, library_version
from vitviz.checkpoints.preprocessing import HF_DEFAULTS, hf_preprocessing

LOOKS_LIKE = "a Hugging Face ViT"
_ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "quick_gelu": "quick_gelu",
    "relu": "relu",
}
_EPS = {
    "vit": 1e-12,
    "deit": 1e-12,
    "dinov2": 1e-6,
    "dinov2_with_registers": 1e-6,
    "vit_msn": 1e-12,  # ViT-MSN: a ViT under its own name
    "ijepa": 1e-12,  # I-JEPA: a ViT with no CLS token; its classifier reads the mean token
    "vit_mae": 1e-12,  # ViT-MAE: a ViT with a fixed sin-cos table, its encoder unmasked
    "beit": 1e-12,  # BEiT: a relative position bias per layer, no k bias, mean pooling
    "data2vec-vision": 1e-12,  # Data2Vec's image model: BEiT's layout
}
_BEITS = ("beit", "data2vec-vision")
_REL_TABLE = (  # BEiT's per-layer relative position bias, saved and in-memory names
    "attention.attention.relative_position_bias.relative_position_bias_table",
    "relative_position_bias.relative_position_bias_table",
)
# config.json fields: those this converter reads or the weights' shapes show, and those that only
# describe or matter only for training or other outputs. Any other field is named in the notes
# when transformers is not importable to check the model (with it, its own model decides).
READ_FIELDS = frozenset(
    [
        "model_type",
        "architectures",
        "hidden_act",
        "layer_norm_eps",
        "num_attention_heads",
        "image_size",
        "id2label",
        "pooler_act",
        "use_swiglu_ffn",
        "hidden_size",
        "num_hidden_layers",
        "intermediate_size",
        "mlp_ratio",
        "num_channels",
        "patch_size",
        "qkv_bias",
        "num_register_tokens",
        "layerscale_value",
        "pooler_output_size",
    ]
)
DESCRIPTIVE_FIELDS = frozenset(
    [
        "_name_or_path",
        "transformers_version",
        "dtype",
        "torch_dtype",
        "label2id",
        "problem_type",
        "return_dict",
        "output_attentions",
        "output_hidden_states",
        "chunk_size_feed_forward",
        "is_encoder_decoder",
        "attention_probs_dropout_prob",
        "hidden_dropout_prob",
        "drop_path_rate",
        "initializer_range",
        "encoder_stride",
        "use_mask_token",
        "out_features",
        "out_indices",
        "stage_names",
        "apply_layernorm",
        "reshape_hidden_states",
        # ViT-MAE: its pre-training's masking (off for the encoder vitviz shows), its decoder
        "mask_ratio",
        "norm_pix_loss",
        "decoder_hidden_size",
        "decoder_num_hidden_layers",
        "decoder_num_attention_heads",
        "decoder_intermediate_size",
    ]
)
# ViT-MAE's forward drops mask_ratio of the patches at random and shuffles the rest; vitviz
# shows its encoder on every patch in order, which the library gives with these settings
MAE_UNMASKED = {"mask_ratio": 0.0}


def ordered_noise(model: nn.Module, x: Tensor) -> dict[str, Any]:
    """A ViT-MAE's masking noise, ascending: no patch shuffled (with mask_ratio 0, none
    dropped); (B, patches). Other models take none."""
    if getattr(model.config, "model_type", None) != "vit_mae":
        return {}
    p = int(model.config.patch_size)
    n = (x.shape[-2] // p) * (x.shape[-1] // p)
    return {"noise": torch.arange(n, dtype=x.dtype).expand(x.shape[0], n)}


# transformers' model of a Hugging Face ViT folder, a ViT-MAE's patches kept in order
LIBRARY_MODEL = transformers_reference(inputs=ordered_noise)

_LAYER = re.compile(r"^(.*?)(?:encoder\.layer|layers|encoder\.layers)\.(\d+)\.")
# Each role of a layer's tensors, by the names transformers saves and holds in memory.
_ROLES = {
    "q": ("attention.attention.query", "attention.q_proj"),
    "k": ("attention.attention.key", "attention.k_proj"),
    "v": ("attention.attention.value", "attention.v_proj"),
    "attn.proj": ("attention.output.dense", "attention.o_proj"),
    "norm1": ("layernorm_before", "norm1"),
    "norm2": ("layernorm_after", "norm2"),
    "mlp.fc1": ("intermediate.dense", "mlp.fc1"),
    "mlp.fc2": ("output.dense", "mlp.fc2"),
}


def detect(source: Source) -> bool:
    return any(k.endswith("embeddings.patch_embeddings.projection.weight") for k in source.state)


def _base_prefix(state: dict[str, Tensor]) -> str:
    key = next(k for k in state if k.endswith("embeddings.patch_embeddings.projection.weight"))
    return key[: -len("embeddings.patch_embeddings.projection.weight")]


def _layer_prefixes(state: dict[str, Tensor], base: str) -> dict[int, str]:
    """{layer: its key prefix} under ``base``, else at the top (transformers 5.24 saves a
    ViTMSN's layers as ``encoder.layer.N`` beside ``vit.embeddings``)."""
    for where in dict.fromkeys((base, "")):
        found: dict[int, str] = {}
        for key in state:
            m = _LAYER.match(key)
            if m and m.group(1) == where:
                found[int(m.group(2))] = key[: m.end()]
        if found:
            return found
    return {}


def _model_type(source: Source, state: dict[str, Tensor], base: str) -> str:
    cfg = source.hf_config
    if cfg is not None:
        return str(cfg["model_type"])
    if f"{base}embeddings.register_tokens" in state:
        return "dinov2_with_registers"
    if any(".layer_scale1.lambda1" in k for k in state):
        return "dinov2"
    if f"{base}embeddings.distillation_token" in state:
        return "deit"
    return "vit"


def convert(source: Source) -> Conversion:
    cfg: dict[str, Any] = dict(source.hf_config or {})
    t = Taker(source, LOOKS_LIKE)
    notes: list[str] = []
    out: dict[str, Tensor] = {}
    base = _base_prefix(t.state)
    model_type = _model_type(source, t.state, base)
    if model_type not in _EPS:
        raise CheckpointError(
            f"{source.name}: Hugging Face model_type {model_type!r} is not "
            f"supported (supported: {', '.join(_EPS)})."
        )
    if cfg.get("use_swiglu_ffn"):
        raise CheckpointError(
            f"{source.name}: DINOv2 with a SwiGLU MLP (giant) is not supported by vitviz's ViT."
        )
    layers = _layer_prefixes(t.state, base)
    depth = check_depth(source, sorted(layers))
    e = base + "embeddings."
    out["patch_embed.proj.weight"] = patch = t.take(e + "patch_embeddings.projection.weight")
    out["patch_embed.proj.bias"] = t.take(e + "patch_embeddings.projection.bias")
    D, C, p, p2 = patch.shape
    if p != p2:
        raise CheckpointError(f"{source.name}: non-square patches {p}×{p2} are not supported.")
    cls = t.maybe(e + "cls_token")  # I-JEPA has none
    if cls is not None:
        out["cls_token"] = cls
    dist = t.maybe(e + "distillation_token")
    if dist is not None:
        out["dist_token"] = dist
    regs = t.maybe(e + "register_tokens")
    if regs is not None:
        out["reg_token"] = regs
    pos = t.maybe(e + "position_embeddings")  # (1, 1 (+1) + P, D); BEiT's may be absent
    if pos is not None:
        out["pos_embed"] = pos
    if t.drop([e + "mask_token"]):
        notes.append(dropped(["mask_token"], "used only for masked-image pre-training"))
    if model_type == "vit_mae":
        gone = t.drop([k for k in list(t.state) if k.startswith("decoder.")])
        if gone:
            notes.append(dropped(gone, "ViT-MAE's pixel decoder (pre-training only)"))
        notes.append(
            "ViT-MAE: its encoder on every patch in order (random masking and shuffling off: "
            "mask_ratio 0), as transformers gives it with mask_ratio 0 and ordered noise"
        )
    if any(
        k.endswith("encoder.relative_position_bias.relative_position_bias_table") for k in t.state
    ):
        raise CheckpointError(
            f"{source.name}: a BEiT with one relative position bias shared by every layer is "
            "not supported (only the per-layer tables)"
        )
    qkv_bias = True
    layer_scale = False
    rel_pos = False
    for i in range(depth):
        a, b = layers[i], f"blocks.{i}."
        weights = {r: t.take(*(f"{a}{n}.weight" for n in names)) for r, names in _ROLES.items()}
        biases = {r: t.maybe(*(f"{a}{n}.bias" for n in names)) for r, names in _ROLES.items()}
        out[b + "attn.qkv.weight"] = fuse_qkv(weights.pop("q"), weights.pop("k"), weights.pop("v"))
        qkv = [biases.pop(r) for r in ("q", "k", "v")]
        qkv_bias = any(x is not None for x in qkv)
        if qkv_bias:  # BEiT's k has none: a zero bias is the same attention
            zero = next(x for x in qkv if x is not None).new_zeros(weights["attn.proj"].shape[1])
            out[b + "attn.qkv.bias"] = fuse_qkv(*(zero if x is None else x for x in qkv))
        table = t.maybe(*(a + name for name in _REL_TABLE))
        if table is not None:
            out[b + "attn.relative_position_bias_table"] = table
            rel_pos = True
            t.drop([a + n.replace("_table", "_index") for n in _REL_TABLE])  # recomputed
        for role, w in weights.items():
            out[f"{b}{role}.weight"] = w
            if biases[role] is None:
                raise CheckpointError(f"{source.name}: {a}{_ROLES[role][0]}.bias is missing.")
            out[f"{b}{role}.bias"] = biases[role]  # type: ignore[assignment]
        for j in (1, 2):
            gamma = t.maybe(f"{a}layer_scale{j}.lambda1", f"{a}lambda_{j}")
            if gamma is not None:
                out[f"{b}ls{j}.gamma"] = gamma
                layer_scale = True
    mean_pool = f"{base}pooler.layernorm.weight" in t  # BEiT: LayerNorm of the mean patch token
    # a BEiT base model without its pooler: neither norm (its last hidden state is unnormed)
    final_norm = mean_pool or f"{base}layernorm.weight" in t or model_type not in _BEITS
    if final_norm:
        norm = "pooler.layernorm" if mean_pool else "layernorm"
        out["fc_norm.weight" if mean_pool else "norm.weight"] = t.take(f"{base}{norm}.weight")
        out["fc_norm.bias" if mean_pool else "norm.bias"] = t.take(f"{base}{norm}.bias")
    else:
        notes.append("no final norm and no pooler: the CLS token of the last block is the output")
    num_classes, head_hidden = _take_head(t, base, out, cfg, notes)
    t.refuse_leftovers()

    act = cfg.get("hidden_act", "gelu")
    if act not in _ACTIVATIONS:
        raise CheckpointError(
            f"{source.name}: hidden_act {act!r} is not supported "
            f"(supported: {', '.join(_ACTIVATIONS)})."
        )
    prefix = (cls is not None) + (dist is not None)
    both = "head.weight" in out and out["head.weight"].shape[1] == 2 * D  # Dinov2ForImage...
    inferred: dict[str, Any] = dict(
        class_token=cls is not None,
        # no CLS: the classifier reads the mean of the tokens (IJepaForImageClassification);
        # a pooler reads the first token, a patch (IJepaModel's)
        global_pool="token_avg"
        if both
        else "avg"
        if mean_pool
        else "token"
        if cls is not None or out.get("pre_logits.0.weight") is not None
        else "avg",
        fc_norm=mean_pool,
        final_norm=final_norm,
        rel_pos_bias=rel_pos,
        pos_embed="learned" if pos is not None else "none",
        patch_size=p,
        in_channels=C,
        dim=D,
        depth=depth,
        num_classes=num_classes,
        distill_token=dist is not None,
        distill_head=dist is None or "head_dist.weight" in out,
        qkv_bias=qkv_bias,
        num_register_tokens=0 if regs is None else regs.shape[1],
        layer_scale_init=1.0 if layer_scale else None,
        activation=_ACTIVATIONS[act],
        norm_eps=float(cfg.get("layer_norm_eps", _EPS[model_type])),
        mlp_hidden_dim=out["blocks.0.mlp.fc1.weight"].shape[0],
        head_hidden_dim=head_hidden,
    )
    if regs is not None:
        inferred["pos_embed_prefix"] = 1  # CLS only: registers join after the position embedding
        inferred["pos_embed_interp"] = "bicubic_antialias"
    if "num_attention_heads" in cfg:
        inferred["heads"] = int(cfg["num_attention_heads"])
    elif standard_heads(D):
        inferred["heads"] = standard_heads(D)
        notes.append(f"no config.json: heads {inferred['heads']} assumed for width {D}")
    size = cfg.get("image_size")
    if size is None and pos is None and rel_pos:  # BEiT: the bias table's square grid
        side = (math.isqrt(out["blocks.0.attn.relative_position_bias_table"].shape[0] - 3) + 1) // 2
        size = (side * p, side * p)
    elif size is None and pos is not None:
        grid = grid_from_table(pos.shape[1] - prefix)
        size = None if grid is None else (grid[0] * p, grid[1] * p)
    if size is not None:
        inferred["image_size"] = size
    names = names_from_id2label(cfg.get("id2label"), num_classes)

    model_size = inferred.get("image_size", 224)
    model_size = (model_size, model_size) if isinstance(model_size, int) else tuple(model_size)
    proc = source.preprocessor
    if proc is None:
        proc = HF_DEFAULTS.get(
            "dinov2" if model_type.startswith("dinov2") else model_type, HF_DEFAULTS["vit"]
        )  # ViT-MSN's and I-JEPA's: ViT's processor
        notes.append(
            f"{source.preprocessor_found}: the {model_type} image processor's defaults are used"
        )
    prep, prep_notes = hf_preprocessing(proc, model_size)
    notes += prep_notes
    conversion = finish(
        source,
        family=f"huggingface-{model_type}",
        looks_like=LOOKS_LIKE,
        inferred=inferred,
        required={"heads": example_heads(D), "image_size": 224},
        state=out,
        class_names=names,
        preprocessing=prep,
        notes=notes,
    )
    unread = sorted(set(cfg) - READ_FIELDS - DESCRIPTIVE_FIELDS)
    if unread and library_version("transformers") is None:
        notes.append(
            f"config.json fields vitviz did not read (transformers is not installed to check "
            f"them): {', '.join(unread)}"
        )
    if source.hf_config is not None:  # the folder names transformers' class: it checks ours
        arch = (cfg.get("architectures") or [""])[0]
        args: dict[str, Any] = {"model_type": model_type}
        if model_type == "vit_mae":  # the encoder alone, unmasked
            arch, args = "ViTMAEModel", {**args, **MAE_UNMASKED}
        conversion.reference = Reference("transformers", str(arch), args, how=LIBRARY_MODEL)
    return conversion


def _take_head(
    t: Taker, base: str, out: dict[str, Tensor], cfg: dict[str, Any], notes: list[str]
) -> tuple[int, int | None]:
    """Classifier(s) or pooler -> head / head_dist / pre_logits; returns (classes, head hidden)."""
    if "cls_classifier.weight" in t:  # DeiTForImageClassificationWithTeacher
        out["head.weight"] = t.take("cls_classifier.weight")
        out["head.bias"] = t.take("cls_classifier.bias")
        out["head_dist.weight"] = t.take("distillation_classifier.weight")
        out["head_dist.bias"] = t.take("distillation_classifier.bias")
        notes.append(
            "DeiT with teacher: the logits are the mean of the CLS and distillation "
            "classifiers, as transformers gives them"
        )
        return out["head.weight"].shape[0], None
    if "classifier.weight" in t:
        w = t.state["classifier.weight"]
        D = out["patch_embed.proj.weight"].shape[0]
        if w.shape[1] not in (D, 2 * D):
            raise CheckpointError(
                f"{t.source.name}: a classifier over {w.shape[1]} features of {D}-wide tokens "
                f"is not one vitviz reads (it reads the CLS token, the mean token, or both)."
            )
        if w.shape[1] == 2 * D:
            notes.append("the classifier reads the CLS token and the mean of the patch tokens")
        out["head.weight"] = t.take("classifier.weight")
        out["head.bias"] = t.take("classifier.bias")
        return out["head.weight"].shape[0], None
    if f"{base}pooler.dense.weight" in t:
        if cfg.get("pooler_act", "tanh") == "tanh":
            out["pre_logits.0.weight"] = t.take(f"{base}pooler.dense.weight")
            out["pre_logits.0.bias"] = t.take(f"{base}pooler.dense.bias")
            notes.append(
                "no classifier: the output is the pooler (dense + tanh on CLS), as pooler_output"
            )
            return 0, out["pre_logits.0.weight"].shape[0]
        gone = t.drop([f"{base}pooler.dense.weight", f"{base}pooler.dense.bias"])
        notes.append(dropped(gone, "pooler with an activation vitviz does not have"))
    return 0, None


FAMILY = Family(
    "huggingface",
    detect,
    convert,
    info=FamilyInfo(
        label="Hugging Face transformers ViTs",
        names="ViT, DeiT (with teacher), DINOv2 (with registers) and their classifiers, BEiT, "
        "Data2Vec-vision, ViT-MSN, ViT-MAE (the encoder), I-JEPA",
        forms=(
            "save_pretrained folder (config.json, weights, "
            "preprocessor_config.json or processor_config.json)"
        ),
        parts=(
            "attention (BEiT: with a relative position bias)",
            "pre-norm blocks",
            "GELU MLP",
            "LayerScale (DINOv2, BEiT)",
            "learnt position table",
            "CLS, distillation and register tokens",
            "CLS, mean or CLS + mean pooling",
            "Conv2d patch embedding",
        ),
    ),
)
