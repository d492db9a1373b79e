"""A Hiera in words: its architecture line, its parts, and the model info's lines per stage."""

from __future__ import annotations

from vitviz.kinds.pyramid.hiera_config import HieraConfig


def architecture(cfg: HieraConfig) -> str:
    pos = "abswin position" if cfg.abs_win_pos else "absolute position"
    return (
        f"Hiera, widths {'-'.join(map(str, cfg.dims))}, depths {'-'.join(map(str, cfg.depths))}, "
        f"heads {'-'.join(map(str, cfg.heads))}, mask units {cfg.mask_unit[0]}×{cfg.mask_unit[1]}"
        f", {pos}"
    )


def parts(cfg: HieraConfig) -> tuple[str, ...]:
    windowed = [str(s) for s, w in enumerate(cfg.mask_unit_attn) if w]
    residual = "a Linear" if cfg.expand_proj else "[max, mean] over 2×2 (width doubled)"
    return (
        f"Conv2d stem (kernel {cfg.patch_kernel}, stride {cfg.patch_stride}, padding "
        f"{cfg.patch_padding})",
        "position table: a global table resized bicubic + a window table tiled per mask unit"
        if cfg.abs_win_pos
        else "absolute position table",
        f"mask-unit attention in stage(s) {', '.join(windowed) or 'none'} (and the first block "
        "of the stage after), global attention elsewhere",
        f"each later stage's first block max-pools its queries 2×2 and widens its residual by "
        f"{residual}, then max-pools it 2×2",
        "pre-norm blocks, LayerNorm eps " + f"{cfg.norm_eps:g}"
        + (", LayerScale on both branches" if cfg.layer_scale else ""),
        "MLP with GELU",
        "no CLS token; the head reads the LayerNorm of the mean of the last stage's tokens",
    )  # fmt: skip


def stage_lines(cfg: HieraConfig) -> list[str]:
    lines = [
        f"stem stride {cfg.patch_stride} (kernel {cfg.patch_kernel}), trained at "
        f"{'×'.join(map(str, cfg.image_size))}"
    ]
    for s in range(cfg.num_stages):
        unit = (cfg.mask_unit[0] // cfg.q_stride[0] ** s, cfg.mask_unit[1] // cfg.q_stride[1] ** s)
        scope = f"mask units {unit[0]}×{unit[1]}" if cfg.mask_unit_attn[s] else "global"
        pool = f", queries pooled {cfg.q_stride[0]}×{cfg.q_stride[1]} at its start" if s else ""
        lines.append(
            f"stage {s}: {cfg.depths[s]} blocks, width {cfg.dims[s]}, {cfg.heads[s]} heads, "
            f"attention {scope}{pool}, MLP {cfg.mlp_hidden_dims[s]}"
        )
    return lines
