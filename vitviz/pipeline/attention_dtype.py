"""The types an analysis may keep its attention in, and what each costs in precision (the
window's info, ``vitviz-cli explain --attention-dtype``)."""

from __future__ import annotations

import math

import torch

# Attention kept in a half type: each probability is rounded to the type's precision (the
# largest relative error of one entry, half an ulp); maps are computed from it in float32.
ATTENTION_DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}
ATTENTION_PRECISION = {torch.float32: 2.0**-24, torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}
# ... and absolutely for the tiny entries a type holds as subnormals (float16: below 2^-14)
ATTENTION_ABSOLUTE = {torch.float32: 0.0, torch.float16: 2.0**-25, torch.bfloat16: 0.0}


def attention_precision_text(dtype: torch.dtype) -> str:
    """One line saying what keeping attention in ``dtype`` costs, for the info and the CLI."""
    name = str(dtype).removeprefix("torch.")
    if dtype == torch.float32:
        return "attention kept in float32 (exact as computed)"
    eps = ATTENTION_PRECISION[dtype]
    tiny = ATTENTION_ABSOLUTE[dtype]
    below = f" (below 2^-14 within {tiny:.1e} absolute)" if tiny else ""
    return (
        f"attention kept in {name}: each probability within a relative {eps:.1e} "
        f"(2^{math.log2(eps):.0f}) of float32{below}, half the memory; "
        f"maps are computed from it in float32"
    )
