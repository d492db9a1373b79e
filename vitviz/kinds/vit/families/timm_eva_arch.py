"""What a timm ``Eva`` architecture (EVA, EVA-02, timm's ``vit_*_rope_*``, DINOv3, PE) computes,
read from its modules: the ViTConfig settings its weights can't show (rotary kind and its
numbers, heads, norms' eps, pooling, sub-LN, the MLP's kind), or the part vitviz can't compute.

The rotary tables are computed, not stored, so only the architecture (its name, with timm
importable) fixes them; a timm model built on the meta device is read (no weights, no network).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import nn

from vitviz.kinds.vit.families.timm_arch import pool_refusal

ROPE_CLASSES = {
    "RotaryEmbeddingCat": "axial",
    "RotaryEmbeddingMixed": "mixed",
    "RotaryEmbeddingDinoV3": "dinov3",
}


class EvaRefusalError(Exception):
    """A part of the architecture vitviz does not model: the message names it."""


def _identity(module: nn.Module | None) -> bool:
    return module is None or isinstance(module, nn.Identity)


def _rope_settings(model: nn.Module) -> dict[str, Any]:
    rope = getattr(model, "rope", None)
    if rope is None:
        return {"rope": "none"}
    kind = ROPE_CLASSES.get(type(rope).__name__)
    if kind is None:
        raise EvaRefusalError(f"rotary positions of the {type(rope).__name__} kind")
    if getattr(rope, "aug_active", False):
        pass  # train-time coordinate augmentation only: eval is unaffected
    out: dict[str, Any] = {"rope": kind, "rope_xy": rope.grid_indexing == "xy"}
    if kind == "mixed":
        return {**out, "rope_half": False, "rope_temperature": float(rope.temperature)}
    out["rope_half"] = bool(rope.rotate_half)
    out["rope_offset"] = float(rope.grid_offset)
    if kind == "axial":
        if rope.in_pixels or rope.grid_type != "index":
            raise EvaRefusalError("rotary positions in pixel coordinates")
        ref = rope.ref_feat_shape
        out["rope_ref_grid"] = None if ref is None else (int(ref[0]), int(ref[1]))
        out["rope_temperature"] = float(rope.temperature)
        return out
    if rope.min_period is not None or rope.max_period is not None or rope.temperature is None:
        raise EvaRefusalError("DINOv3 rotary periods given by min/max period")
    if rope.normalize_coords != "separate":
        raise EvaRefusalError(f"DINOv3 rotary coordinates normalised by {rope.normalize_coords!r}")
    out["rope_temperature"] = float(rope.temperature)
    return out


def _block_settings(model: nn.Module) -> dict[str, Any]:
    """Settings every block shares (the first's), after checking each block has them, and
    ``kv_heads``: each block's key/value heads (grouped-query attention), None when all are
    ``heads``."""
    found: list[dict[str, Any]] = []
    kv_heads: list[int] = []
    for block in model.blocks:
        kind = type(block).__name__
        if kind != "EvaBlock":
            raise EvaRefusalError(
                "residual post-norm blocks" if kind == "EvaBlockPostNorm" else f"{kind} blocks"
            )
        attn, mlp = block.attn, block.mlp
        if type(attn).__name__ not in ("EvaAttention", "AttentionRope"):
            raise EvaRefusalError(f"{type(attn).__name__} attention")
        if _identity(attn.q_norm) != _identity(attn.k_norm):
            raise EvaRefusalError("a norm on the queries or the keys alone")
        if getattr(attn, "gate", None) is not None:
            raise EvaRefusalError("gated attention")
        kv_heads.append(int(getattr(attn, "num_kv_heads", attn.num_heads)))
        if block.gamma_1 is None and block.gamma_2 is not None:
            raise EvaRefusalError("LayerScale on the MLP branch only")
        mlp_kind = type(mlp).__name__
        if mlp_kind == "Mlp":
            act = mlp.act
            if not (isinstance(act, nn.GELU) and act.approximate == "none"):
                raise EvaRefusalError(f"an MLP with {type(act).__name__}")
        elif mlp_kind in ("SwiGLU", "GluMlp"):
            if not isinstance(mlp.act, nn.SiLU):
                raise EvaRefusalError(f"a gated MLP with {type(mlp.act).__name__}")
        else:
            raise EvaRefusalError(f"{mlp_kind} MLP")
        found.append(
            {
                "heads": int(attn.num_heads),
                "head_dim": int(attn.head_dim),
                "attn_norm": not _identity(attn.norm),
                "mlp_norm": not _identity(mlp.norm),
                "swiglu": mlp_kind != "Mlp",
                "glu_gate_last": bool(getattr(mlp, "gate_last", False)),
                "rotate_half": bool(getattr(attn, "rotate_half", False)),
                "attn_kind": type(attn).__name__,
                "layer_scale": block.gamma_1 is not None,
                "layer_scale_mlp": block.gamma_2 is not None or block.gamma_1 is None,
                "qk_norm": not _identity(attn.q_norm),
            }
        )
    if any(f != found[0] for f in found):
        raise EvaRefusalError("blocks that differ from one another")
    grouped = any(h != found[0]["heads"] for h in kv_heads)
    return {**found[0], "kv_heads": tuple(kv_heads) if grouped else None}


def describe_eva(model: nn.Module) -> dict[str, Any]:
    """The settings of a built timm ``Eva`` (meta device is enough). Raises EvaRefusalError naming
    the first part vitviz's ViT can't compute, or the attribute another timm version's Eva lacks
    (vitviz reads timm's modules: one that keeps a setting elsewhere is refused, never guessed).
    Keys beyond ViTConfig's: ``attn_kind``, ``glu_gate_last``, ``layer_scale``, ``rotate_half``,
    ``patch_bias``; ``kv_heads`` None without grouped-query attention."""
    try:
        return _describe_eva(model)
    except AttributeError as exc:
        from timm import __version__ as timm_version

        raise EvaRefusalError(
            f"an Eva whose modules timm {timm_version} lays out otherwise than vitviz reads "
            f"({exc}); vitviz reads timm 1.0.31's"
        ) from exc


def _describe_eva(model: nn.Module) -> dict[str, Any]:
    if type(model).__name__ != "Eva":
        raise EvaRefusalError(f"timm's {type(model).__name__} architecture")
    pool = _pool_settings(model)
    if not pool and model.global_pool not in ("token", "avg"):
        raise EvaRefusalError(f"global_pool {model.global_pool!r}")
    embed = model.patch_embed
    if type(embed).__name__ != "PatchEmbed" or not _identity(getattr(embed, "norm", None)):
        raise EvaRefusalError(f"{type(embed).__name__} patch embedding with a norm")
    proj = embed.proj
    if not isinstance(proj, nn.Conv2d) or proj.kernel_size != proj.stride:
        raise EvaRefusalError("overlapping patch embedding")
    if getattr(embed, "dynamic_img_pad", False):
        raise EvaRefusalError("a patch embedding that pads the image")
    blocks = _block_settings(model)
    leaves = [m for m in model.modules() if not any(True for _ in m.children())]
    norms = [m for m in leaves if "norm" in type(m).__name__.lower()]
    norm = _norm_kind(norms)
    eps = {float(m.eps) for m in norms}
    if len(eps) > 1:
        raise EvaRefusalError("norms with different eps")
    settings = _rope_settings(model)
    if settings["rope"] != "none" and blocks["rotate_half"] != settings["rope_half"]:
        raise EvaRefusalError("rotary tables and attention that pair channels differently")
    fc_norm = not _identity(model.fc_norm)
    settings.update(
        heads=blocks["heads"],
        attn_head_dim=None
        if blocks["heads"] * blocks["head_dim"] == model.embed_dim
        else blocks["head_dim"],
        attn_norm=blocks["attn_norm"],
        mlp_norm=blocks["mlp_norm"],
        swiglu=blocks["swiglu"],
        glu_gate_last=blocks["glu_gate_last"],
        attn_kind=blocks["attn_kind"],
        layer_scale=blocks["layer_scale"],
        layer_scale_mlp=blocks["layer_scale_mlp"],
        qk_norm=blocks["qk_norm"],
        kv_heads=blocks["kv_heads"],
        norm=norm,
        norm_eps=eps.pop() if eps else 1e-6,
        global_pool=model.global_pool,
        fc_norm=fc_norm,
        final_norm=fc_norm or not _identity(model.norm),
        pre_norm=not _identity(model.norm_pre),
        class_token=model.cls_token is not None,
        num_register_tokens=0 if model.reg_token is None else int(model.reg_token.shape[1]),
        no_embed_class=bool(model.no_embed_class),
        pos_embed="learned" if model.pos_embed is not None else "none",
        patch_bias=proj.bias is not None,
        pos_embed_interp="bicubic_antialias" if model.dynamic_img_size else "bicubic",
    )
    if fc_norm and not _identity(model.norm):
        raise EvaRefusalError("a final norm and an fc_norm both")
    settings.update(pool)
    return settings


def _norm_kind(norms: list[nn.Module]) -> str:
    """The blocks' norm: "layernorm" when every norm is a LayerNorm, "rmsnorm" when every one is
    timm's RmsNorm with its weight (Sapiens2's); else EvaRefusalError naming the others."""
    if all(isinstance(m, nn.LayerNorm) for m in norms):
        return "layernorm"
    if all(type(m).__name__ == "RmsNorm" and m.elementwise_affine for m in norms):
        return "rmsnorm"
    kinds = sorted({type(m).__name__ for m in norms})
    if kinds == ["RmsNorm"]:
        raise EvaRefusalError("RmsNorm norms without a weight")
    others = [k for k in kinds if k != "LayerNorm"]
    if others == ["RmsNorm"]:
        raise EvaRefusalError("RmsNorm and LayerNorm norms together")
    raise EvaRefusalError(f"{', '.join(others)} norms")


def _pool_settings(model: nn.Module) -> dict[str, Any]:
    """An Eva's attention pool (MAP: PE core's ``attn_pool``, AttentionPoolLatent over every
    token, prefix tokens included) as ViTConfig settings: its own head count; {} without one.
    Its MLP width is read from the weights; its norm's eps is checked with the others'."""
    pool = getattr(model, "attn_pool", None)
    if pool is None:
        return {}
    why = pool_refusal(pool)
    if why is not None:
        raise EvaRefusalError(why)
    act = pool.mlp.act
    if not (isinstance(act, nn.GELU) and act.approximate == "none"):
        raise EvaRefusalError(f"an attention-pool MLP with {type(act).__name__}")
    if not isinstance(pool.proj, nn.Linear) or pool.proj.out_features != model.embed_dim:
        raise EvaRefusalError("an attention pool that changes the width")
    return {"global_pool": "map", "pool_heads": int(pool.num_heads), "pool_include_prefix": True}


def build_meta(name: str, model_args: Mapping[str, Any]) -> nn.Module:
    """timm's ``name`` on the meta device (ImportError without timm; timm's own error for a
    name or argument it doesn't take)."""
    import timm
    import torch

    args = {k: v for k, v in model_args.items() if k != "pretrained"}
    with torch.device("meta"):
        return timm.create_model(name, pretrained=False, **args)
