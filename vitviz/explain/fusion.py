"""fuse(·) of DESIGN §5: combine the heads of one layer's attention."""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor

FUSIONS = ("mean", "max", "min")


def fuse_heads(attn: Tensor, fusion: str = "mean", heads: Sequence[int] | None = None) -> Tensor:
    """(B, H, N, N) -> (B, N, N) by mean, max or min over heads (or over the chosen ``heads``)."""
    if heads is not None:
        heads = list(heads)
        if not heads:
            raise ValueError("the subset of heads to fuse is empty")
        n = attn.shape[1]
        bad = [h for h in heads if not 0 <= h < n]
        if bad:
            raise ValueError(f"head indices {bad} out of range for {n} heads")
        attn = attn[:, heads]
    if fusion == "mean":
        return attn.mean(dim=1)
    if fusion == "max":
        return attn.amax(dim=1)
    if fusion == "min":
        return attn.amin(dim=1)
    raise ValueError(f"unknown head fusion {fusion!r}; use one of {', '.join(FUSIONS)}")
