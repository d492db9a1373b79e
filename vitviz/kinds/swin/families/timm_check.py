"""What the library check builds for a timm Swin conversion (DESIGN §4): timm's model of the
name with every setting vitviz read from the file's tensors or its settings given as its model
args (widths, depths, heads, windows, MLP ratio, patch, a v2's pretrained windows), so the check
compares like with like whatever the name's defaults; or why timm's keywords can't say one."""

from __future__ import annotations

from typing import Any

from vitviz.kinds.swin.config import SwinConfig

TIMM_NORM_EPS = 1e-5  # timm's Swin LayerNorms
TIMM_CPB_HIDDEN = 512  # timm's v2 continuous position bias MLP


def swin_args(cfg: SwinConfig) -> tuple[dict[str, Any], str, str]:
    """(timm's SwinTransformer / SwinTransformerV2 keywords for ``cfg``, the words its note says
    them with, why a setting can't be given ("" when every one can))."""
    dims, stages = tuple(cfg.dims), len(cfg.depths)
    hidden = tuple(cfg.mlp_hidden_dims or (4 * d for d in dims))
    ratios = {h / d for h, d in zip(hidden, dims, strict=True)}
    doubling = all(d == dims[0] * 2**i for i, d in enumerate(dims))
    why = ""
    if not doubling:
        why = f"its Swin doubles the width each stage (this file's: {', '.join(map(str, dims))})"
    elif len(ratios) > 1:
        why = "its Swin has one MLP ratio for every stage (this file's differ)"
    elif cfg.norm_eps != TIMM_NORM_EPS:
        why = f"its Swin's LayerNorm eps is {TIMM_NORM_EPS:g} (this file's: {cfg.norm_eps:g})"
    elif cfg.activation != "gelu":
        why = f"its Swin's MLP is GELU (this file's: {cfg.activation})"
    elif cfg.version == 2 and cfg.cpb_hidden != TIMM_CPB_HIDDEN:
        why = f"its v2 position-bias MLP is {TIMM_CPB_HIDDEN} wide (this file's: {cfg.cpb_hidden})"
    if why:
        return {}, "", f"timm can't build it as this file has it: {why}"
    ratio = ratios.pop()
    # int(dim · ratio) must give the file's hidden width back
    if any(int(d * ratio) != h for d, h in zip(dims, hidden, strict=True)):
        ratio = (hidden[0] + 0.5) / dims[0]
    windows = tuple(int(w) for w in cfg.window_sizes)
    args: dict[str, Any] = {
        "patch_size": cfg.patch_size,
        "embed_dim": dims[0],
        "depths": tuple(cfg.depths),
        "num_heads": tuple(cfg.heads),
        # one (h, w) per stage: timm reads a bare pair of ints as one window for every stage
        "window_size": tuple((w, w) for w in windows),
        "mlp_ratio": ratio,
        "qkv_bias": cfg.qkv_bias,
    }
    if cfg.version == 2:
        args["pretrained_window_sizes"] = tuple(cfg.pretrained_window_sizes or (0,) * stages)
    window = str(windows[0]) if len(set(windows)) == 1 else ", ".join(map(str, windows))
    words = (
        f"width {dims[0]}, depths {', '.join(map(str, cfg.depths))}, heads "
        f"{', '.join(map(str, cfg.heads))}, window {window}"
    )
    return args, words, ""
