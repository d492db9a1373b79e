"""What the library check builds for a timm pyramid conversion (DESIGN §4): timm's model of the
name with the sizes vitviz read from the file's tensors given as its model args (per-stage
widths, depths, reductions, MLP ratios), so the check compares like with like whatever the
name's defaults; or why timm's keywords can't say one. The heads and windows, which the tensors
don't show, are the name's for a folder naming its architecture (a setting given against it is
what the check catches), and the user's beside a name the user gave (``--arch``: the name then
stands for the rest)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def ratios(hidden: Sequence[int], dims: Sequence[int]) -> tuple[float, ...]:
    """Per-stage MLP ratios whose ``int(dim · ratio)`` gives each hidden width back."""
    out = []
    for h, d in zip(hidden, dims, strict=True):
        r = h / d
        out.append(r if int(d * r) == h else (h + 0.5) / d)
    return tuple(out)


def stage_words(cfg: Any, heads: bool = False) -> str:
    """ "widths 16, 32, depths 1, 1" (and "heads 1, 2")."""
    shown = [("widths", cfg.dims), ("depths", cfg.depths), *([("heads", cfg.heads)] * heads)]
    return ", ".join(f"{what} {', '.join(map(str, values))}" for what, values in shown)


def pvt_args(cfg: Any, heads: bool = False) -> dict[str, Any]:
    """timm's PyramidVisionTransformerV2 keywords for ``cfg``'s sizes (and heads)."""
    return {
        **({"num_heads": tuple(cfg.heads)} if heads else {}),
        "embed_dims": tuple(cfg.dims),
        "depths": tuple(cfg.depths),
        "sr_ratios": tuple(cfg.sr_ratios),
        "mlp_ratios": ratios(cfg.mlp_hidden_dims, cfg.dims),
        "qkv_bias": cfg.qkv_bias,
        "linear": cfg.linear,
    }


def twins_args(cfg: Any, heads: bool = False) -> dict[str, Any]:
    """timm's Twins keywords for ``cfg``'s sizes (and heads)."""
    args: dict[str, Any] = {
        **({"num_heads": tuple(cfg.heads)} if heads else {}),
        "patch_size": cfg.patch_size,
        "embed_dims": tuple(cfg.dims),
        "depths": tuple(cfg.depths),
        "sr_ratios": tuple(cfg.sr_ratios),
        "mlp_ratios": ratios(cfg.mlp_hidden_dims, cfg.dims),
    }
    return args


def hiera_args(cfg: Any, heads: bool = False) -> tuple[dict[str, Any], str]:
    """timm's Hiera keywords for ``cfg``'s sizes (and heads), and why they can't say it (""
    when they can): timm's Hiera multiplies its width and heads by one ``dim_mul`` and
    ``head_mul`` per stage and has one MLP ratio."""
    dims, per = tuple(cfg.dims), tuple(cfg.heads)
    dim_mul = dims[1] / dims[0] if len(dims) > 1 else 2.0
    head_mul = per[1] / per[0] if len(per) > 1 else 2.0
    widths_ok = all(int(dims[0] * dim_mul**s) == d for s, d in enumerate(dims))
    heads_ok = not heads or all(int(per[0] * head_mul**s) == h for s, h in enumerate(per))
    mlp = {h / d for h, d in zip(cfg.mlp_hidden_dims, dims, strict=True)}
    if not (widths_ok and heads_ok and len(mlp) == 1):
        return {}, "timm's Hiera has one width and head multiplier and one MLP ratio"
    args: dict[str, Any] = {"num_heads": per[0], "head_mul": head_mul} if heads else {}
    args |= {
        "embed_dim": dims[0],
        "stages": tuple(cfg.depths),
        "dim_mul": dim_mul,
        "mlp_ratio": mlp.pop(),
    }
    return args, ""
