"""What a timm architecture name means for vitviz: its computation settings, or why it is refused.

A timm checkpoint's weights don't carry the head count, the norms' eps, the activation, the
pooling or the block kind, and several timm architectures differ from a plain ViT only there
(CLIP's eps 1e-5 and QuickGELU, ``vit_base_patch16_gap_224``'s 16 heads of 48, a rotary
embedding whose tables are computed, not stored). So the name decides, never a guess:

- timm importable: the architecture (with the folder's ``model_args``) is built on the meta
  device (no memory, no weights, ~10 ms) and its modules are read: ``Attention.num_heads``,
  ``LayerNorm.eps``, the MLP's activation, the block class, pooling, tokens (``describe``).
- timm not importable: the built-in table ``timm_archs.json`` holds the same record for every
  ViT-family name of the timm it was made from (``packaging/make_timm_table.py``); an unknown
  name is refused with "install timm to open ARCH".

Anything vitviz's one ViT can't compute (rotary position in this class, attention-pool heads
other than SigLIP's MAP, SwiGLU, other block classes) makes the record a refusal naming that
part.

A bare state dict has no name. Its *signature* (the sorted key names and shapes, without the
head, whose size is the class count, and without the position table's length, which is the
image size) is looked up in the table: the timm architectures it could be. When every candidate
computes the same way, that is used and noted ("recognised as timm's X"); when they differ
(e.g. a plain ViT-S and a rotary ViT-S share every stored tensor), the checkpoint is refused
naming the candidates and ``--arch``. A signature no timm name has (a model trained with other
widths or depths) opens as the common architecture with its assumptions stated. The shipped
table is the one source of candidates, so what a bare file opens as does not depend on whether
timm is installed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from torch import Tensor, nn

from vitviz.checkpoints.families.timm_names import ArchError as ArchError  # re-exported
from vitviz.checkpoints.families.timm_names import timm_version
from vitviz.core.optional import install_to_open

TABLE = "timm_archs.json"
# model_args a table record stays true under (they change sizes the weights already show).
SIZE_ARGS = frozenset({"img_size", "num_classes", "in_chans", "dynamic_img_size", "global_pool"})
# Why a timm model class other than VisionTransformer is refused, by class name.
CLASS_REASONS = {
    "Eva": "rotary position embedding (EVA-style blocks)",
    "Beit": "relative position bias (BEiT)",
    "Cait": (
        "class-attention blocks (CaiT) that these tensors lack (vitviz's CaiT kind opens a "
        "CaiT's own blocks_token_only.* tensors)"
    ),
    "Xcit": (
        "cross-covariance attention (XCiT) that these tensors lack (vitviz's XCiT kind opens an "
        "XCiT's own cls_attn_blocks.* tensors)"
    ),
    "VisionTransformerSAM": "windowed attention with relative position (SAM)",
    "NaFlexVit": "NaFlex variable-resolution embedding",
    "Hiera": "a hierarchical (pooling-attention) ViT, Hiera",
}
BLOCK_REASONS = {
    "DiffParallelScalingBlock": "parallel blocks with differential attention (the difference of "
    "two softmax maps)"
}
# block classes vitviz's ViT computes (ParallelScalingBlock: vitviz/blocks/parallel.py;
# ParallelThingsBlock: vitviz/blocks/branches.py)
VIT_BLOCKS = ("Block", "ResPostBlock", "ParallelScalingBlock", "ParallelThingsBlock")
ATTENTION_REASONS = {"DiffAttention": "differential attention (the difference of two softmax maps)"}
MLP_REASONS = {"SwiGLU": "SwiGLU MLP", "GluMlp": "gated (GLU) MLP", "SwiGLUPacked": "SwiGLU MLP"}


@dataclass(frozen=True)
class ArchRecord:
    """One timm architecture as vitviz sees it.

    ``settings``: ViTConfig field values the weights can't all tell (heads, norm_eps,
    activation, global_pool, ...), ``layer_scale`` as a bool; empty when refused.
    ``refusal``: the part vitviz does not model, or None. ``signature``: hash of the state dict's
    key names and shapes (see ``signature_of``).
    """

    name: str
    settings: dict[str, Any]
    refusal: str | None
    signature: str

    def to_json(self) -> dict[str, Any]:
        return {"settings": self.settings, "refusal": self.refusal, "signature": self.signature}


def signature_of(shapes: Mapping[str, Any]) -> str:
    """Hash of ``{key: shape}`` (tensors or shape tuples) without ``head.*``/``head_dist.*``
    (their size is the class count) and with ``pos_embed``'s length left out (the image size)."""
    lines = []
    for key in sorted(shapes):
        if key.split(".", 1)[0] in ("head", "head_dist"):
            continue
        value = shapes[key]
        shape = list(value.shape) if isinstance(value, Tensor) else list(value)
        if key == "pos_embed" and len(shape) == 3:
            shape = [shape[0], -1, shape[2]]
        lines.append(f"{key}:{','.join(map(str, shape))}")
    return hashlib.sha1("\n".join(lines).encode()).hexdigest()[:16]


def _is_identity(module: nn.Module | None) -> bool:
    return module is None or isinstance(module, nn.Identity)


def _activation(act: nn.Module) -> str | None:
    kind = type(act).__name__
    if isinstance(act, nn.GELU):
        return "gelu" if act.approximate == "none" else "gelu_tanh"
    return {"GELU": "gelu", "GELUTanh": "gelu_tanh", "QuickGELU": "quick_gelu", "ReLU": "relu"}.get(
        kind
    )


def pool_refusal(pool: nn.Module) -> str | None:
    """What of timm's attention pool vitviz's MAP head (``AttentionPool``) can't compute."""
    if type(pool).__name__ != "AttentionPoolLatent":
        return f"attention-pool head {type(pool).__name__}"
    q = pool.q
    plain = (
        pool.latent_len == 1
        and pool.pos_embed is None
        and isinstance(q, nn.Linear)
        and q.bias is not None
        and pool.kv.bias is not None
        and _is_identity(pool.q_norm)
        and _is_identity(pool.k_norm)
        and pool.pool == "token"
        and pool.mlp is not None
        and isinstance(pool.norm, nn.LayerNorm)
        and _is_identity(pool.mlp.norm)
        and _activation(pool.mlp.act) is not None
    )
    return None if plain else "an attention-pool head (MAP) with other parts than SigLIP's"


def _vit_refusal(model: nn.Module) -> str | None:
    """The first part of a timm VisionTransformer vitviz's ViT can't compute, or None."""
    if getattr(model, "attn_pool", None) is not None:
        why = pool_refusal(model.attn_pool)
        if why is not None:
            return why
    elif model.global_pool not in ("token", "avg"):
        return f"global_pool {model.global_pool!r}"
    embed = model.patch_embed
    if type(embed).__name__ == "HybridEmbed":
        why = hybrid_refusal(embed)
        if why is not None:
            return why
    elif type(embed).__name__ != "PatchEmbed":
        return f"{type(embed).__name__} patch embedding (a hybrid stem)"
    if not _is_identity(getattr(embed, "norm", None)):
        return "a norm inside the patch embedding"
    proj = embed.proj
    stem_only = type(embed).__name__ == "HybridEmbed" and _is_identity(proj)  # MobileCLIP's
    if not stem_only and (not isinstance(proj, nn.Conv2d) or proj.kernel_size != proj.stride):
        return "overlapping patch embedding"
    why = _blocks_refusal(model)
    if why is not None:
        return why
    norms = _norms(model)
    if any(type(m).__name__ not in ("LayerNorm", "LayerNorm2d", "RmsNorm") for m in norms):
        return "a norm other than LayerNorm or RMSNorm"
    if any(
        not isinstance(m, nn.LayerNorm) and "RmsNorm" in type(m).__name__
        for m in model.modules()
        if type(m).__name__ != "RmsNorm"
    ):
        return "an RMSNorm other than timm's RmsNorm"
    if len({type(m).__name__ == "RmsNorm" for m in norms}) > 1:
        return "LayerNorms and RMSNorms together"
    if len({m.eps for m in norms}) > 1:
        return "norms with different eps"
    if any(getattr(m, "weight", None) is None for m in norms):
        return "a norm without a learnt scale"
    if any(type(m).__name__ == "RmsNorm" for m in norms) and (
        getattr(model, "attn_pool", None) is not None
        or not _is_identity(getattr(model.patch_embed, "norm", None))
    ):
        return "RMSNorm with an attention pool"
    return None


def _blocks_refusal(model: nn.Module) -> str | None:
    """The first part of a timm VisionTransformer's blocks vitviz's ViT can't compute."""
    kinds = {type(block).__name__ for block in model.blocks}
    for block in model.blocks:
        kind = type(block).__name__
        if kind not in VIT_BLOCKS or len(kinds) > 1:
            return BLOCK_REASONS.get(kind, f"{kind} blocks")
        if kind == "ParallelThingsBlock" and len(block.attns) < 2:
            return "a parallel block of one branch"
        if kind == "ParallelScalingBlock":
            why = _parallel_refusal(block)
            if why is not None:
                return why
            continue
        for attn, mlp in _attentions_and_mlps(block):
            why = _serial_refusal(attn, mlp)
            if why is not None:
                return why
    return None


def _attentions_and_mlps(block: nn.Module) -> list[tuple[nn.Module, nn.Module]]:
    """[(attention, MLP)] of a serial block, or of each branch of a ParallelThingsBlock."""
    if type(block).__name__ != "ParallelThingsBlock":
        return [(block.attn, block.mlp)]
    return [(a.attn, f.mlp) for a, f in zip(block.attns, block.ffns, strict=True)]


def _serial_refusal(attn: nn.Module, mlp: nn.Module) -> str | None:
    """The first part of a block's attention and MLP vitviz's ViT can't compute, or None."""
    if type(attn).__name__ != "Attention":
        kind = type(attn).__name__
        return ATTENTION_REASONS.get(kind, f"{kind} attention")
    if getattr(attn, "gate", None) is not None:
        return "gated attention"
    if type(mlp).__name__ != "Mlp":
        return MLP_REASONS.get(type(mlp).__name__, f"{type(mlp).__name__} MLP")
    if _activation(mlp.act) is None:
        return f"activation {type(mlp.act).__name__}"
    if attn.proj.bias is None or mlp.fc1.bias is None or mlp.fc2.bias is None:
        return "projections without a bias"
    return None


def _norms(model: nn.Module) -> list[nn.Module]:
    """Every LayerNorm and timm RmsNorm of ``model``."""
    return [
        m for m in model.modules() if isinstance(m, nn.LayerNorm) or type(m).__name__ == "RmsNorm"
    ]


def _parallel_refusal(block: nn.Module) -> str | None:
    """What of timm's ParallelScalingBlock vitviz's ``ParallelBlock`` can't compute, or None."""
    if block.out_proj is not None:
        return "parallel blocks with one fused output projection"
    if _activation(block.mlp_act) is None:
        return f"activation {type(block.mlp_act).__name__}"
    if block.attn_out_proj.bias is None or block.mlp_out_proj.bias is None:
        return "projections without a bias"
    if block.in_proj.out_features != block.in_split[0] + 3 * block.in_split[1]:
        return "a parallel block of other widths"
    return None


def _stem_layers(backbone: nn.Module) -> tuple[str, list[nn.Module]]:
    """(vitviz's stem kind or timm's class name, the backbone's modules)."""
    kind = type(backbone).__name__
    mods = list(backbone.modules())
    if kind == "ConvStem":
        return "convstem", mods
    if kind == "FeatureListNet" and any(type(m).__name__ == "Bottleneck" for m in mods):
        return "resnet_d", mods
    is_v2_stem = kind == "Sequential" and [n for n, _ in backbone.named_children()] == [
        "conv",
        "norm",
        "pool",
    ]
    return ("resnetv2" if kind == "ResNetV2" or is_v2_stem else kind), mods


def hybrid_refusal(embed: nn.Module) -> str | None:
    """Why vitviz's stems can't compute a timm HybridEmbed's backbone, or None (timm's ResNetV2
    without pre-activation, GroupNorm + ReLU and weight-standardised convs; its ResNet-D
    features with the deep stem, avg-down, BatchNorm + ReLU; a Conv2d projection after)."""
    proj = embed.proj
    if not _is_identity(proj) and (
        not isinstance(proj, nn.Conv2d) or proj.kernel_size != proj.stride
    ):
        return "a hybrid stem with an overlapping projection"
    if getattr(embed, "dynamic_img_pad", False):
        return "a hybrid stem with dynamic padding"
    kind, mods = _stem_layers(embed.backbone)
    names = {type(m).__name__ for m in mods}
    if kind == "convstem":
        allowed = {"ConvStem", "ConvNormAct", "Conv2d", "BatchNormAct2d", "GELU", "Identity",
                   "Sequential"}  # fmt: skip
        convs = [m for m in mods if isinstance(m, nn.Conv2d)]
        unpadded = all(c.padding == (0, 0) and c.kernel_size == c.stride for c in convs)
        gelus = [m for m in mods if isinstance(m, nn.GELU)]
        if names - allowed or not unpadded or any(g.approximate != "none" for g in gelus):
            return "a convolutional stem other than MobileCLIP's"
        return None
    if _is_identity(proj):
        return "a hybrid stem without a patch projection"
    if kind == "resnetv2":
        allowed = {"ResNetV2", "Sequential", "StdConv2dSame", "StdConv2d", "GroupNormAct",
                   "MaxPool2dSame", "MaxPool2d", "ConstantPad2d", "ReLU", "Identity",
                   "ResNetStage", "Bottleneck", "DownsampleConv", "ClassifierHead",
                   "SelectAdaptivePool2d", "Flatten", "Dropout"}  # fmt: skip
        if names - allowed or "ConstantPad2d" in names:
            return f"a ResNetV2 stem with {', '.join(sorted(names - allowed)) or 'fixed padding'}"
        is_net = type(embed.backbone).__name__ == "ResNetV2"
        if is_net and not _is_identity(embed.backbone.norm):
            return "a pre-activation ResNetV2 stem"
        gns = [m for m in mods if type(m).__name__ == "GroupNormAct"]
        if len({(m.num_groups, m.eps) for m in gns}) > 1:
            return "a ResNetV2 stem with GroupNorms of different settings"
        return None
    if kind == "resnet_d":
        allowed = {"FeatureListNet", "Sequential", "Conv2d", "BatchNorm2d", "ReLU", "MaxPool2d",
                   "AvgPool2d", "Identity", "Bottleneck"}  # fmt: skip
        if names - allowed:
            return f"a ResNet stem with {', '.join(sorted(names - allowed))}"
        bns = [m for m in mods if isinstance(m, nn.BatchNorm2d)]
        if len({m.eps for m in bns}) > 1 or not isinstance(embed.backbone.conv1, nn.Sequential):
            return "a ResNet stem other than ResNet-D's (deep stem, avg-down)"
        return None
    return f"a {kind} hybrid stem"


def stem_settings(embed: nn.Module) -> dict[str, Any]:
    """What a hybrid's weights don't say of its backbone: padding, eps, GroupNorm groups."""
    kind, mods = _stem_layers(embed.backbone)
    if kind in ("resnet_d", "convstem"):
        bn = next(m for m in mods if isinstance(m, nn.BatchNorm2d))
        return {"kind": kind, "norm_eps": float(bn.eps)}
    conv = next(m for m in mods if type(m).__name__ in ("StdConv2dSame", "StdConv2d"))
    gn = next(m for m in mods if type(m).__name__ == "GroupNormAct")
    return {
        "kind": kind,
        "same_padding": type(conv).__name__ == "StdConv2dSame",
        "conv_eps": float(conv.eps),
        "norm_eps": float(gn.eps),
        "groups": int(gn.num_groups),
    }


def _vit_settings(model: nn.Module) -> dict[str, Any]:
    block = model.blocks[0]
    parallel = type(block).__name__ == "ParallelScalingBlock"
    branches = len(block.attns) if type(block).__name__ == "ParallelThingsBlock" else 1
    if type(block).__name__ == "ParallelThingsBlock":  # read as the serial block of its first
        block = _FirstBranch(block.attns[0], block.ffns[0])
    attn = block if parallel else block.attn
    dim = model.embed_dim
    heads = int(attn.num_heads)
    attn_dim = dim if parallel else attn.qkv.out_features // 3
    qkv_bias = (block.in_proj if parallel else attn.qkv).bias is not None
    norms = _norms(model)
    rms = any(type(m).__name__ == "RmsNorm" for m in norms)
    return {
        "heads": heads,
        "attn_head_dim": None if attn_dim == dim else attn_dim // heads,
        "norm_eps": float(norms[0].eps) if norms else 1e-6,
        "activation": _activation(block.mlp_act if parallel else block.mlp.act),
        "qkv_bias": qkv_bias,
        "layer_scale": not _is_identity(getattr(block, "ls" if parallel else "ls1", None)),
        "class_token": bool(model.has_class_token),
        "distill_token": getattr(model, "dist_token", None) is not None,
        "num_register_tokens": int(model.num_reg_tokens),
        "no_embed_class": bool(model.no_embed_class),
        "pos_embed": "learned" if model.pos_embed is not None else "none",
        "pre_norm": not _is_identity(model.norm_pre),
        "global_pool": model.global_pool,
        "fc_norm": not _is_identity(model.fc_norm),
        "final_norm": not (_is_identity(model.norm) and _is_identity(model.fc_norm)),
        **({"stem": stem_settings(model.patch_embed)} if type(model.patch_embed).__name__
           == "HybridEmbed" else {}),
        **({"pool_include_prefix": True} if getattr(model, "pool_include_prefix", False) else {}),
        **({"res_post_norm": True} if type(block).__name__ == "ResPostBlock" else {}),
        **({"norm": "rmsnorm"} if rms else {}),
        **({"qk_norm": True} if not _is_identity(attn.q_norm) else {}),
        **({"parallel": True} if parallel else {}),
        **({"branches": branches} if branches > 1 else {}),
        **({"attn_norm": True} if not parallel and not _is_identity(attn.norm) else {}),
        **({"mlp_norm": True} if not parallel and not _is_identity(block.mlp.norm) else {}),
    }  # fmt: skip


class _FirstBranch(nn.Module):
    """A ParallelThingsBlock's first branches as a serial block's names (attn, mlp, ls1)."""

    def __init__(self, attn_branch: nn.Module, mlp_branch: nn.Module) -> None:
        super().__init__()
        self.attn, self.mlp, self.ls1 = attn_branch.attn, mlp_branch.mlp, attn_branch.ls


def _relpos_refusal(model: nn.Module) -> str | None:
    """The first part of a timm VisionTransformerRelPos vitviz's ViT can't compute, or None."""
    if model.global_pool not in ("token", "avg"):
        return f"global_pool {model.global_pool!r}"
    if type(model.patch_embed).__name__ != "PatchEmbed" or not _is_identity(
        getattr(model.patch_embed, "norm", None)
    ):
        return "a patch embedding other than timm's plain one"
    norms = [m for m in model.modules() if isinstance(m, nn.LayerNorm)]
    if any(type(m).__name__ != "LayerNorm" for m in norms) or len({m.eps for m in norms}) > 1:
        return "norms other than one LayerNorm eps"
    biases = [b.attn.rel_pos for b in model.blocks] + [model.shared_rel_pos]
    for bias in (b for b in biases if b is not None):
        kind = type(bias).__name__
        if kind == "RelPosMlp" and bias.mode != "cr":
            return f"a relative position MLP in {bias.mode!r} mode (vitviz models 'cr')"
        if kind not in ("RelPosMlp", "RelPosBias"):
            return f"relative position {kind}"
        if kind == "RelPosBias" and model.shared_rel_pos is not None:
            return "a relative position table shared by every layer"
    kinds = {type(block).__name__ for block in model.blocks}
    for block in model.blocks:
        if type(block).__name__ not in ("RelPosBlock", "ResPostRelPosBlock") or len(kinds) > 1:
            return BLOCK_REASONS.get(type(block).__name__, f"{type(block).__name__} blocks")
        if not (_is_identity(block.attn.q_norm) and _is_identity(block.attn.k_norm)):
            return "qk_norm (a norm on queries and keys)"
        if type(block.mlp).__name__ != "Mlp" or _activation(block.mlp.act) is None:
            return f"{type(block.mlp).__name__} MLP with {type(block.mlp.act).__name__}"
    return None


def _relpos_settings(model: nn.Module) -> dict[str, Any]:
    block = model.blocks[0]
    attn = block.attn
    bias = attn.rel_pos if model.shared_rel_pos is None else model.shared_rel_pos
    mlp = bias.mlp.fc1.out_features if type(bias).__name__ == "RelPosMlp" else 0
    norms = [m for m in model.modules() if isinstance(m, nn.LayerNorm)]
    return {
        "heads": int(attn.num_heads),
        "norm_eps": float(norms[0].eps),
        "activation": _activation(block.mlp.act),
        "qkv_bias": attn.qkv.bias is not None,
        "layer_scale": not _is_identity(getattr(block, "ls1", None)),
        "class_token": model.cls_token is not None,
        "distill_token": False,
        "num_register_tokens": 0,
        "no_embed_class": False,
        "pos_embed": "none",
        "pre_norm": False,
        "global_pool": model.global_pool,
        "fc_norm": not _is_identity(model.fc_norm),
        "final_norm": True,
        "rel_pos_bias": True,
        "rel_pos_mlp": int(mlp),
        "rel_pos_shared": model.shared_rel_pos is not None,
        **({"res_post_norm": True} if type(block).__name__ == "ResPostRelPosBlock" else {}),
    }


def describe(name: str, model: nn.Module) -> ArchRecord:
    """The record of a built timm model (meta device is enough: only modules are read)."""
    signature = signature_of({k: tuple(v.shape) for k, v in model.state_dict().items()})
    kind = type(model).__name__
    if kind == "VisionTransformerRelPos":
        refusal = _relpos_refusal(model)
        return ArchRecord(name, {} if refusal else _relpos_settings(model), refusal, signature)
    if kind not in ("VisionTransformer", "VisionTransformerDistilled"):
        reason = CLASS_REASONS.get(kind, f"timm's {kind} architecture (not a plain ViT)")
        if kind == "Eva" and name.startswith("vit_pe_"):
            reason = "Perception Encoder blocks (rotary attention)"
        return ArchRecord(name, {}, reason, signature)
    refusal = _vit_refusal(model)
    settings = {} if refusal else _vit_settings(model)
    return ArchRecord(name, settings, refusal, signature)


def from_timm(name: str, model_args: Mapping[str, Any]) -> ArchRecord:
    """Build ``name`` with timm on the meta device and describe it. Raises ArchError when timm
    doesn't know the name or refuses the arguments."""
    import torch

    args = {k: v for k, v in model_args.items() if k != "pretrained"}
    try:
        import timm

        with torch.device("meta"):
            model = timm.create_model(name, pretrained=False, **args)
    except Exception as exc:  # timm's own error for a name or argument it doesn't take
        raise ArchError(f"timm can't build {name} ({type(exc).__name__}: {exc})") from exc
    return describe(name, model)


@cache
def table() -> dict[str, Any]:
    """The built-in table: {"timm_version": ..., "archs": {name: record json}}."""
    text = resources.files(__package__).joinpath(TABLE).read_text(encoding="utf-8")
    return dict(json.loads(text))


def from_table(name: str) -> ArchRecord | None:
    entry = table()["archs"].get(name)
    if entry is None:
        return None
    return ArchRecord(name, dict(entry["settings"]), entry["refusal"], entry["signature"])


def record_for(name: str, model_args: Mapping[str, Any]) -> tuple[ArchRecord, str]:
    """The record of a named architecture and where it came from ("timm 1.0.31" or "vitviz's
    table of timm 1.0.31"). Raises ArchError for a name neither knows, or for ``model_args``
    that the table can't account for."""
    version = timm_version()
    made_from = table()["timm_version"]
    plain = set(model_args) <= SIZE_ARGS - {"global_pool"}
    if version is not None and not (version == made_from and plain and from_table(name)):
        return from_timm(name, model_args), f"timm {version}"
    where = f"vitviz's table of timm {made_from}"
    if version == made_from:  # the same facts timm would give, without importing it
        where = f"timm {made_from} (vitviz's table of it)"
    rec = from_table(name)
    if rec is None:
        raise ArchError(f"{install_to_open('timm', name)}: it is not in {where}")
    changed = sorted(set(model_args) - SIZE_ARGS)
    if changed:
        with_args = f"{name} with model_args {', '.join(changed)}"
        raise ArchError(install_to_open("timm", with_args))
    if "global_pool" in model_args and rec.settings:
        pool = model_args["global_pool"]
        if pool not in ("token", "avg") and pool != rec.settings.get("global_pool"):
            return ArchRecord(name, {}, f"global_pool {pool!r}", rec.signature), where
        rec = ArchRecord(name, {**rec.settings, "global_pool": pool}, None, rec.signature)
    return rec, where


def candidates(signature: str) -> list[ArchRecord]:
    """Every table architecture whose stored tensors have this signature."""
    archs = table()["archs"]
    return [
        ArchRecord(n, dict(e["settings"]), e["refusal"], e["signature"])
        for n, e in sorted(archs.items())
        if e["signature"] == signature
    ]


def computes_alike(records: list[ArchRecord]) -> bool:
    """True when every record gives the same settings (or the same refusal)."""
    first = records[0]
    return all(r.settings == first.settings and r.refusal == first.refusal for r in records)
