"""Compute devices: what is present, and turning a user's choice into a torch.device."""

from __future__ import annotations

import torch

from vitviz.core.errors import VitvizError

DEVICE_CHOICES = ("auto", "cpu", "cuda", "mps")
USE_CPU = 'use the CPU: --device cpu (device="cpu" in Python)'


def available_devices() -> list[str]:
    """Devices usable here, CPU first: e.g. ['cpu', 'cuda:0', 'cuda:1', 'mps']."""
    found = ["cpu"]
    if torch.cuda.is_available():
        found += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        found.append("mps")
    return found


def full_float32(device: torch.device) -> torch.device:
    """``device``, with CUDA's TF32 shortcuts turned off when it is a GPU: cuDNN convolutions
    (on by default in PyTorch) and matmuls then round as float32 does, so the maps a GPU draws
    are the CPU's (a PVT v2's logits differed by 4e-3 with TF32 convolutions)."""
    if device.type == "cuda":
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    return device


def resolve_device(choice: str | torch.device | None = "auto") -> torch.device:
    """'auto' picks CUDA, then MPS, then CPU; an absent device is a VitvizError (a ValueError) in
    one line. A GPU
    computes in full float32 from then on (``full_float32``)."""
    return full_float32(_resolve(choice))


def _resolve(choice: str | torch.device | None) -> torch.device:
    if isinstance(choice, torch.device):
        return choice
    name = (choice or "auto").strip().lower()
    if name == "auto":
        present = available_devices()
        pick = next((d for d in present if d.startswith("cuda")), None) or (
            "mps" if "mps" in present else "cpu"
        )
        return torch.device(pick)
    try:
        device = torch.device(name)
    except RuntimeError as exc:
        raise VitvizError(
            f"unknown device {choice!r}; use one of {', '.join(DEVICE_CHOICES)}"
        ) from exc
    if device.type == "cuda" and not torch.cuda.is_available():
        raise VitvizError(f"CUDA was asked for but no CUDA GPU is available here; {USE_CPU}")
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise VitvizError(
            f"{name} asked for but only {torch.cuda.device_count()} CUDA GPU(s) exist"
        )
    if device.type == "mps" and name not in available_devices():
        raise VitvizError(f"MPS (Apple GPU) was asked for but is not available here; {USE_CPU}")
    if device.type not in ("cpu", "cuda", "mps"):
        raise VitvizError(f"unsupported device {choice!r}; use one of {', '.join(DEVICE_CHOICES)}")
    return device
