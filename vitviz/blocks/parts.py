"""The building blocks a ViT config uses, in words (the model info's "parts" line): which
attention, norms, MLP, position information, prefix tokens, pooling and stem the family maps
onto vitviz's one ViT."""

from __future__ import annotations

from vitviz.blocks.config import ViTConfig

ACTIVATION_WORDS = {
    "gelu": "GELU",
    "gelu_tanh": "GELU (tanh)",
    "quick_gelu": "QuickGELU",
    "relu": "ReLU",
}
POOL_WORDS = {
    "token": "the CLS token",
    "avg": "the mean of the patch tokens",
    "token_avg": "the CLS token and the mean patch token side by side",
    "map": "an attention-pooling probe (MAP) over the final tokens",
}
POSITION_WORDS = {
    "learned": "a learnt position table",
    "sincos": "1-D sin-cos positions",
    "sincos2d": "2-D sin-cos positions",
    "none": "no absolute positions",
}

ROPE_WORDS = {
    "axial": "rotary positions (EVA-02's axial RoPE)",
    "mixed": "rotary positions (RoPE-Mixed, learnt frequencies per layer and head)",
    "dinov3": "rotary positions (DINOv3's)",
}


def vit_parts(cfg: ViTConfig) -> tuple[str, ...]:
    """E.g. ("attention with a relative position bias per layer and head", "pre-norm blocks
    (LayerNorm eps 1e-06)", "GELU MLP", "LayerScale", "no absolute positions", "CLS token",
    "head reads the mean of the patch tokens through fc_norm", "Conv2d patch embedding")."""
    out = []
    attention = "attention with a relative position bias per layer and head"
    if cfg.rel_pos_mlp:
        shared = "shared by every layer" if cfg.rel_pos_shared else "per layer"
        attention = f"attention with a relative position bias from an MLP on log offsets, {shared}"
    out.append(attention if cfg.rel_pos_bias else "attention")
    if cfg.rope != "none":
        out[-1] += f" with {ROPE_WORDS.get(cfg.rope, cfg.rope)}"
    if not cfg.qkv_bias:
        out[-1] += " (no q/k/v bias)"
    if cfg.qk_norm:
        out[-1] += " with a norm on each head's q and k (qk-norm)"
    if cfg.kv_heads is not None and any(h != cfg.heads for h in cfg.kv_heads):
        grouped = sum(h != cfg.heads for h in cfg.kv_heads)
        out[-1] += (
            f", grouped-query in {grouped} of {cfg.depth} blocks "
            f"({'/'.join(str(h) for h in sorted(set(cfg.kv_heads)))} key/value heads)"
        )
    if cfg.attn_norm:
        out.append("a norm on the heads' output before proj (sub-LN)")
    place = "residual post" if cfg.res_post_norm else "pre" if cfg.norm_first else "post"
    if cfg.parallel:
        place = "parallel (attention and MLP side by side on one norm, one fused in-projection) pre"
    if cfg.branches > 1:
        place = (
            f"{cfg.branches}-branch ({cfg.branches} attentions summed, then {cfg.branches} MLPs "
            f"summed, each on its own norm; {cfg.branches} × {cfg.heads} heads a layer) pre"
        )
    norm = "RMSNorm" if cfg.norm == "rmsnorm" else "LayerNorm"
    out.append(f"{place}-norm blocks ({norm} eps {cfg.norm_eps:g})")
    if cfg.pre_norm:
        out.append("a LayerNorm before the blocks")
    act = ACTIVATION_WORDS.get(cfg.activation, cfg.activation)
    mlp = "SwiGLU MLP" if cfg.swiglu else f"{act} MLP"
    out.append(mlp + (" with a norm before fc2 (sub-LN)" if cfg.mlp_norm else ""))
    if cfg.layer_scale_init is not None:
        out.append("LayerScale" + ("" if cfg.layer_scale_mlp else " on the attention branch only"))
    out.append(POSITION_WORDS.get(cfg.pos_embed, cfg.pos_embed))
    prefix = ["CLS token"] if cfg.class_token else []
    prefix += ["distillation token"] if cfg.distill_token else []
    prefix += [f"{cfg.num_register_tokens} registers"] if cfg.num_register_tokens else []
    out.append(", ".join(prefix) if prefix else "no prefix tokens")
    head = f"head reads {POOL_WORDS.get(cfg.global_pool, cfg.global_pool)}"
    if cfg.global_pool == "map" and cfg.pool_heads not in (None, cfg.heads):
        head += f" ({cfg.pool_heads} heads of its own)"
    out.append(head + (" through fc_norm" if cfg.fc_norm else ""))
    if cfg.stem is not None:
        out.append(cfg.stem.words())
    else:
        out.append(f"{'Linear' if cfg.patch_embed == 'linear' else 'Conv2d'} patch embedding")
    return tuple(out)
