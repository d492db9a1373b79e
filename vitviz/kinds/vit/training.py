"""Training a ViT: its settings (width, depth, heads, positions), presets, checks and probe.

Torch-free at import (the Training tab and the CLI's parser read ``SIDE`` before torch loads);
``build``, ``probe_maps`` and ``rollout_maps`` import torch when called.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from vitviz.kindapi.sides import SettingValue, TrainingField, TrainSettings, at_least

if TYPE_CHECKING:
    import numpy as np
    from torch import Tensor, nn

POS_EMBEDS = ("learned", "sincos", "sincos2d")

FIELDS = (
    TrainingField("dim", 64, "Width (dim)", limits=(8, 2048, 8), flag="--dim",
                  help="token width (default 64)"),
    TrainingField("depth", 4, "Depth", limits=(1, 48, 1), flag="--depth",
                  help="encoder blocks (default 4)"),
    TrainingField("heads", 4, "Heads", limits=(1, 32, 1), flag="--heads",
                  help="attention heads; must divide --dim (default 4)"),
    TrainingField("pos_embed", "learned", "Position embedding", editor="choice",
                  choices=POS_EMBEDS, more=True),
)  # fmt: skip

# A ViT that learns the synthetic shapes on a laptop CPU: 64 px, 8 × 8 patches of 8 px, the
# tutorials' width and depth. Fresh shapes every epoch (600,000 images in all), so neither
# augmentation nor stochastic depth is needed; fixed 2-D sine-cosine positions learn faster than
# a learned table here.
SHAPES_PRESET: dict[str, SettingValue] = dict(
    dataset="shapes",
    image_size=64,
    patch_size=8,
    dim=64,
    depth=4,
    heads=4,
    pos_embed="sincos2d",
    train_size=10_000,
    val_size=1_000,
    augment=False,
    drop_path_rate=0.0,
    epochs=60,
    batch_size=64,
    lr=2e-3,
    warmup_epochs=1.0,
)


class ViTTraining:
    """The ViT's training side (``vitviz.kindapi.sides.TrainingSide``)."""

    fields = FIELDS
    presets: Mapping[str, Mapping[str, SettingValue]] = {
        "tutorial": {},  # the TrainConfig defaults: the tutorials' CIFAR-10 ViT
        "shapes": SHAPES_PRESET,
    }
    preset_labels: Mapping[str, str] = {
        "tutorial": "Tutorial CIFAR-10 ViT (32 px, patch 8)",
        "shapes": "Shapes ViT (64 px, patch 8)",
    }
    keeps_preset_on_dataset = False  # a data set brings the ViT preset made for it

    def model_kwargs(
        self, cfg: TrainSettings, num_classes: int, in_channels: int
    ) -> dict[str, SettingValue]:
        """Keyword arguments of vitviz.blocks.ViTConfig for the run ``cfg``."""
        return dict(
            in_channels=cfg.in_channels or in_channels,
            image_size=cfg.image_size,
            patch_size=cfg.patch_size,
            num_classes=num_classes,
            dim=cfg.dim,
            depth=cfg.depth,
            heads=cfg.heads,
            mlp_ratio=cfg.mlp_ratio,
            pos_embed=cfg.pos_embed,
            drop_path_rate=cfg.drop_path_rate,
        )

    def problems(self, cfg: TrainSettings) -> list[str]:
        """Positive sizes, a width the heads divide, whole patches, a known position embedding."""
        problems: list[str] = []
        for name in ("image_size", "patch_size", "dim", "depth", "heads"):
            at_least(problems, name, getattr(cfg, name), 1)
        if not problems:
            if cfg.dim % cfg.heads:
                problems.append(f"dim {cfg.dim} is not divisible by heads {cfg.heads}")
            if cfg.image_size % cfg.patch_size:
                problems.append(
                    f"image size {cfg.image_size} is not divisible by patch size {cfg.patch_size}"
                )
            if cfg.pos_embed == "sincos2d" and cfg.dim % 4:
                problems.append(f"pos_embed sincos2d needs dim divisible by 4 (got {cfg.dim})")
        if cfg.pos_embed not in POS_EMBEDS:
            problems.append(f"pos_embed must be one of {', '.join(POS_EMBEDS)}")
        return problems

    def build(self, cfg: TrainSettings, num_classes: int, channels: int) -> nn.Module:
        """A freshly initialised VisionTransformer."""
        from vitviz.blocks import VisionTransformer, ViTConfig

        return VisionTransformer(ViTConfig(**self.model_kwargs(cfg, num_classes, channels)))

    def probe_maps(self, model: nn.Module, x: Tensor) -> tuple[np.ndarray, np.ndarray, int]:
        """CLS rollout (gh, gw) scaled to max 1, the last layer's mean-over-heads CLS attention
        to the patches (gh, gw) (raw probabilities), the predicted class; x (1, C, H, W)."""
        import numpy as np
        import torch

        from vitviz import explain

        was_training = model.training
        model.eval()
        try:
            with torch.inference_mode():
                out = model.forward_explained(x, capture_attention=True)
        finally:
            model.train(was_training)
        attentions = [a.float() for a in out.attentions]  # L × (1, H, N, N)
        rollout = explain.rollout(attentions, out.grid, out.num_prefix_tokens)[0]  # (gh, gw)
        maps = explain.attention_maps(attentions[-1], out.grid, out.num_prefix_tokens, 0)
        cls_map = maps[0].mean(dim=0)  # (gh, gw), from (1, H, gh, gw)
        predicted = int(out.logits[0].argmax()) if out.logits.shape[-1] else -1
        return (
            rollout.cpu().numpy().astype(np.float32),
            cls_map.cpu().numpy().astype(np.float32),
            predicted,
        )

    def rollout_maps(self, model: nn.Module, x: Tensor) -> tuple[Tensor, Tensor]:
        """Logits (B, classes) and the CLS rollout (B, gh, gw) of a batch x (B, C, H, W)."""
        from vitviz import explain

        out = model.forward_explained(x, capture_attention=True)
        attentions = [a.float() for a in out.attentions]
        return out.logits, explain.rollout(attentions, out.grid, out.num_prefix_tokens)


SIDE = ViTTraining()
