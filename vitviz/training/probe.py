"""Attention snapshot of one fixed image, taken after every epoch to show a model learning."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn

from vitviz import explain


def probe_maps(model: nn.Module, x: Tensor) -> tuple[np.ndarray, np.ndarray, int]:
    """Rollout and last-layer CLS attention of one normalised image x (1, 3, H, W).

    Returns the CLS rollout (gh, gw) float32 scaled to max 1, the last layer's mean-over-heads
    CLS attention to the patches (gh, gw) float32 (raw probabilities), and the predicted class.
    For a Swin (``model_kind == "swin"``): the windowed rollout over the first stage's grid and
    the last block's attention from the average-pooled query (see ``swin_probe_maps``).
    The model is left in the train/eval mode it was in.
    """
    if getattr(model, "model_kind", None) == "swin":
        return swin_probe_maps(model, x)
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            out = model.forward_explained(x, capture_attention=True)
    finally:
        model.train(was_training)
    attentions = [a.float() for a in out.attentions]  # L × (1, H, N, N)
    rollout = explain.rollout(attentions, out.grid, out.num_prefix_tokens)[0]  # (gh, gw)
    maps = explain.attention_maps(attentions[-1], out.grid, out.num_prefix_tokens, 0)  # (1,H,gh,gw)
    cls_map = maps[0].mean(dim=0)  # (gh, gw)
    predicted = int(out.logits[0].argmax()) if out.logits.shape[-1] else -1
    return (
        rollout.cpu().numpy().astype(np.float32),
        cls_map.cpu().numpy().astype(np.float32),
        predicted,
    )


def swin_probe_maps(model: nn.Module, x: Tensor) -> tuple[np.ndarray, np.ndarray, int]:
    """A Swin's probe of x (1, 3, H, W): the windowed rollout from the average pool over the
    first stage's grid (H_0, W_0) float32 scaled to max 1; the last block's attention, mean over
    heads and over its grid's queries (what the average pool reads), on the last stage's grid
    (H_S, W_S) float32 (rows sum to 1, so it sums to 1); the predicted class."""
    from vitviz.kinds.swin.analysis import analyze_swin
    from vitviz.kinds.swin.attention import windowed_attention
    from vitviz.kinds.swin.rollout import window_step

    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            result = analyze_swin(model, x.float() if x.dtype != torch.float32 else x)
    finally:
        model.train(was_training)
    rollout = result.rollout()  # (H_0, W_0)
    layout = result.layouts[-1]
    H, W = layout.grid
    fused = windowed_attention(result.attentions[-1].float(), layout).mean(dim=1)  # (w, n, n)
    uniform = fused.new_full((H * W,), 1.0 / (H * W))
    # r·Â with Â's rows (no identity): the uniform row through the block's attention
    last = window_step(uniform, fused, layout, inv_sums=fused.new_ones(fused.shape[:2])) - uniform
    predicted = int(result.logits.argmax()) if result.logits.numel() else -1
    return (
        rollout.float().cpu().numpy().astype(np.float32),
        last.reshape(H, W).cpu().numpy().astype(np.float32),
        predicted,
    )
