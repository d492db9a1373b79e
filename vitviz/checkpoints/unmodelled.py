"""Vision transformers vitviz knows by their tensors or their config but does not model: a file
of one is refused naming it, not as an unknown layout (DESIGN §4, exact or refused).

Each entry: what the weights (key names) or a Hugging Face config.json (``model_type``) show,
and the words of the refusal. timm folders are named by their architecture already
(``timm_arch``); these are the bare state dicts and the transformers folders."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# (the part of a key that only this architecture has, its name in the refusal)
BY_KEYS: tuple[tuple[str, str], ...] = ()
# A timm ViT's layout with a part only this architecture has (its blocks are otherwise timm's
# ViT's, so the timm family reads the file and asks this before any tensor is taken)
TIMM_VIT_BY_KEYS = (
    (
        ".lambda_q1",
        "timm's differential attention ViT (vit_dwee_*, vit_dpwee_*, vit_dlittle_*: the "
        "difference of two softmax maps)",
    ),
)
BY_MODEL_TYPE = {
    "cvt": "transformers' CvT (convolutional token embeddings and projections)",
    "mobilevitv2": "transformers' MobileViTV2 (separable self-attention)",
    "siglip2": "transformers' SigLIP 2 (a NaFlex patch embedding of any aspect ratio)",
}


def unmodelled(keys: list[str], hf_config: Mapping[str, Any] | None) -> str | None:
    """The architecture a checkpoint is, when it is one vitviz knows and does not model."""
    model_type = (hf_config or {}).get("model_type")
    if model_type in BY_MODEL_TYPE:
        return BY_MODEL_TYPE[str(model_type)]
    return _by_keys(keys, BY_KEYS + TIMM_VIT_BY_KEYS)


def unmodelled_timm_vit(keys: list[str]) -> str | None:
    """The architecture a file of timm's ViT layout is, when a part of it is one vitviz does
    not model (differential attention); None otherwise."""
    return _by_keys(keys, TIMM_VIT_BY_KEYS)


def _by_keys(keys: list[str], table: tuple[tuple[str, str], ...]) -> str | None:
    for part, name in table:
        if any(part in key for key in keys):
            return name
    return None
