"""AdamW with decoupled weight decay on the weight matrices only, and mixed precision on CUDA."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

NO_DECAY_NAMES = (
    "pos_embed",
    "cls_token",
    "dist_token",
    "reg_token",
    "relative_position_bias_table",  # Swin: a bias, as the Swin recipes leave it
)


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two AdamW groups: matrices and conv kernels decay; biases, norms, tokens and the
    position table do not."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if p.ndim < 2 or name.split(".")[-1] in NO_DECAY_NAMES:
            no_decay.append(p)
        else:
            decay.append(p)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def make_optimizer(
    model: nn.Module, lr: float, weight_decay: float, device: torch.device
) -> torch.optim.Optimizer:
    """AdamW, betas (0.9, 0.999); the fused kernel where the device has one."""
    groups = param_groups(model, weight_decay)
    if device.type in ("cpu", "cuda"):
        try:
            return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.999), fused=True)
        except (RuntimeError, TypeError, ValueError):
            pass
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.999))


@dataclass
class AmpSettings:
    """Autocast dtype (None: full precision) and the GradScaler fp16 needs."""

    device_type: str
    dtype: torch.dtype | None
    scaler: torch.amp.GradScaler | None

    def autocast(self) -> contextlib.AbstractContextManager[None]:
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)

    def backward(self, loss: Tensor) -> None:
        """loss.backward(), scaled for fp16."""
        if self.scaler is None:
            loss.backward()
        else:
            self.scaler.scale(loss).backward()

    def step(
        self,
        optimizer: torch.optim.Optimizer,
        params: nn.Module | Iterable[Tensor],
        grad_clip: float,
    ) -> None:
        """Optional gradient-norm clipping of ``params`` (a module's parameters, or a list of
        them made once), then the optimizer step (unscaled and skipped on overflow for fp16)."""
        if isinstance(params, nn.Module):
            params = params.parameters()
        if self.scaler is None:
            if grad_clip > 0:
                nn.utils.clip_grad_norm_(params, grad_clip)
            optimizer.step()
            return
        if grad_clip > 0:
            self.scaler.unscale_(optimizer)
            nn.utils.clip_grad_norm_(params, grad_clip)
        self.scaler.step(optimizer)
        self.scaler.update()

    def backward_and_step(
        self, loss: Tensor, optimizer: torch.optim.Optimizer, model: nn.Module, grad_clip: float
    ) -> None:
        """loss.backward(), optional gradient-norm clipping, optimizer step (scaled for fp16)."""
        self.backward(loss)
        self.step(optimizer, model, grad_clip)


def amp_settings(mode: str, device: torch.device) -> AmpSettings:
    """Mixed precision for ``mode`` (auto | off | bf16 | fp16) on ``device``: CUDA only; on
    other devices training stays in float32."""
    if device.type != "cuda" or mode == "off":
        return AmpSettings(device.type, None, None)
    if mode == "auto":
        mode = "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    if mode == "bf16":
        return AmpSettings("cuda", torch.bfloat16, None)
    return AmpSettings("cuda", torch.float16, torch.amp.GradScaler("cuda"))
