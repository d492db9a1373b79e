"""Training a Swin: its settings (window, per-stage widths, depths, heads), preset, checks, probe.

Torch-free at import (the Training tab and the CLI's parser read ``SIDE`` before torch loads);
``build``, ``probe_maps`` and ``rollout_maps`` import torch when called.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from vitviz.kindapi.sides import (
    SettingValue,
    TrainingField,
    TrainSettings,
    at_least,
    whole_numbers,
)

if TYPE_CHECKING:
    import numpy as np
    from torch import Tensor, nn

# Per-stage widths, blocks and heads; windows of window_size tokens a side; image_size,
# patch_size, mlp_ratio and drop_path_rate are the shared settings.
FIELDS = (
    TrainingField("window_size", 4, "Window (Swin)", limits=(1, 64, 1), flag="--window-size",
                  help="Swin: window side in tokens (default 4)"),
    TrainingField("swin_dims", (48, 96, 192), "Widths (Swin)", editor="ints",
                  flag="--swin-dims", help="Swin: width per stage (default 48,96,192)"),
    TrainingField("swin_depths", (2, 2, 2), "Depths (Swin)", editor="ints",
                  flag="--swin-depths", help="Swin: blocks per stage (default 2,2,2)"),
    TrainingField("swin_heads", (3, 6, 12), "Heads (Swin)", editor="ints",
                  flag="--swin-heads", help="Swin: heads per stage (default 3,6,12)"),
)  # fmt: skip
_LISTS = ("swin_dims", "swin_depths", "swin_heads")

# A small Swin (the issue's): 32 px, 2-pixel patches, 4 × 4 windows on 16², 8² and 4² grids,
# widths 48-96-192, two blocks (W-MSA, SW-MSA) per stage; the tutorial's optimisation.
SWIN_PRESET: dict[str, SettingValue] = dict(
    model="swin",
    image_size=32,
    patch_size=2,
    window_size=4,
    swin_dims=(48, 96, 192),
    swin_depths=(2, 2, 2),
    swin_heads=(3, 6, 12),
)


class SwinTraining:
    """The Swin's training side (``vitviz.kindapi.sides.TrainingSide``)."""

    fields = FIELDS
    presets: Mapping[str, Mapping[str, SettingValue]] = {"swin": SWIN_PRESET}
    preset_labels: Mapping[str, str] = {"swin": "Small Swin (32 px, patch 2, window 4)"}
    keeps_preset_on_dataset = True  # its preset is not made for a data set: it stays

    def model_kwargs(
        self, cfg: TrainSettings, num_classes: int, in_channels: int
    ) -> dict[str, SettingValue]:
        """Keyword arguments of SwinConfig for the run ``cfg``."""
        return dict(
            in_channels=cfg.in_channels or in_channels,
            image_size=(cfg.image_size, cfg.image_size),
            patch_size=cfg.patch_size,
            num_classes=num_classes,
            dims=tuple(cfg.swin_dims),
            depths=tuple(cfg.swin_depths),
            heads=tuple(cfg.swin_heads),
            window_sizes=(cfg.window_size,) * len(cfg.swin_depths),
            mlp_hidden_dims=tuple(round(cfg.mlp_ratio * d) for d in cfg.swin_dims),
            drop_path_rate=cfg.drop_path_rate,
        )

    def problems(self, cfg: TrainSettings) -> list[str]:
        """A Swin's stages: one width, depth and head count each; widths divisible by heads;
        the image divisible by patch · 2^(stages − 1) · window (whole windows on every stage)."""
        problems: list[str] = []
        for name in ("image_size", "patch_size", "window_size"):
            at_least(problems, name, getattr(cfg, name), 1)
        lists = [whole_numbers(problems, name, getattr(cfg, name)) for name in _LISTS]
        if problems:
            return problems
        dims, depths, heads = lists
        if not len(dims) == len(depths) == len(heads):
            return [
                f"swin_dims, swin_depths and swin_heads need one entry per stage "
                f"(got {len(dims)}, {len(depths)} and {len(heads)})"
            ]
        for s, (d, h) in enumerate(zip(dims, heads, strict=True)):
            if d % h:
                problems.append(f"stage {s}: width {d} is not divisible by {h} heads")
        unit = cfg.patch_size * 2 ** (len(dims) - 1) * cfg.window_size
        if cfg.image_size % unit:
            problems.append(
                f"image size {cfg.image_size} is not divisible by patch {cfg.patch_size} · "
                f"2^{len(dims) - 1} · window {cfg.window_size} = {unit}"
            )
        return problems

    def build(self, cfg: TrainSettings, num_classes: int, channels: int) -> nn.Module:
        """A freshly initialised SwinTransformer."""
        from vitviz.kinds.swin.config import SwinConfig
        from vitviz.kinds.swin.network import SwinTransformer

        return SwinTransformer(SwinConfig(**self.model_kwargs(cfg, num_classes, channels)))

    def probe_maps(self, model: nn.Module, x: Tensor) -> tuple[np.ndarray, np.ndarray, int]:
        """The windowed rollout from the average pool over the first stage's grid (H_0, W_0)
        float32 scaled to max 1; the last block's attention, mean over heads and over its grid's
        queries (what the average pool reads), on the last stage's grid (H_S, W_S) float32 (rows
        sum to 1, so it sums to 1); the predicted class. x (1, C, H, W)."""
        import numpy as np
        import torch

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
        fused = windowed_attention(result.attentions[-1].float(), layout).mean(dim=1)  # (w,n,n)
        uniform = fused.new_full((H * W,), 1.0 / (H * W))
        # r·Â with Â's rows (no identity): the uniform row through the block's attention
        inv_sums = fused.new_ones(fused.shape[:2])
        last = window_step(uniform, fused, layout, inv_sums=inv_sums) - uniform
        predicted = int(result.logits.argmax()) if result.logits.numel() else -1
        return (
            rollout.float().cpu().numpy().astype(np.float32),
            last.reshape(H, W).cpu().numpy().astype(np.float32),
            predicted,
        )

    def rollout_maps(self, model: nn.Module, x: Tensor) -> tuple[Tensor, Tensor]:
        """Logits (B, classes) and the windowed rollout (B, H_0, W_0) of a batch x (B, C, H, W)."""
        import torch

        from vitviz.kinds.swin.rollout import PreparedSwinRollout, fused_blocks

        out = model.forward_explained(x, capture_attention=True)
        maps = []
        for b in range(out.logits.shape[0]):
            mats = fused_blocks([a[b].float() for a in out.attentions], out.layouts)
            prepared = PreparedSwinRollout(mats, out.layouts, out.block_stages, out.stage_grids)
            maps.append(prepared.map())
        return out.logits, torch.stack(maps)


SIDE = SwinTraining()
