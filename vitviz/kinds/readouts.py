"""Each family's ``ModelKind.readout`` (DESIGN §3, §5): its network's final norm and head as
they apply to any block's tokens, read from the network's own modules (nothing recomputed
differently from its forward pass). The feature views and the logit lens are written once on
these (``vitviz.explain.features``)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from vitviz.kindapi.intermediates import Readout


def _is_identity(module: nn.Module) -> bool:
    return isinstance(module, nn.Identity)


def token_layout_readout(model: nn.Module) -> Readout:
    """vitviz's ``VisionTransformer`` (ViT, CLIP/SigLIP towers): its final norm over [prefix,
    patches], then its own ``forward_head`` (the CLS, the mean, an attention pool or a
    distilled pair, as the model reads them). The per-token norm is ``norm``, or ``fc_norm``
    where the final norm comes after the pool."""
    from vitviz.blocks.vit import VisionTransformer

    if not isinstance(model, VisionTransformer):
        name = type(model).__name__
        raise ValueError(f"vitviz can't read a {name}'s blocks out through its head")
    prefix_count = int(model.num_prefix_tokens)

    def logits(prefix: Tensor, patches: Tensor) -> Tensor:
        if prefix.shape[1] != prefix_count:
            raise ValueError(f"a block of this ViT has {prefix_count} prefix tokens")
        return model.forward_head(model.norm(torch.cat([prefix, patches], dim=1)))

    norm = model.fc_norm if _is_identity(model.norm) else model.norm
    return Readout(norm, logits, int(model.config.dim))


def class_attention_readout(model: nn.Module) -> Readout:
    """CaiT and XCiT: head(norm(CLS)); a block before the CLS joins (self-attention, XCA)
    reads the mean patch token instead."""

    def logits(prefix: Tensor, patches: Tensor) -> Tensor:
        token = prefix[:, 0] if prefix.shape[1] else patches.mean(dim=1)
        return model.head(model.norm(token))

    return Readout(model.norm, logits, int(model.config.dim))


def mean_pool_readout(norm: nn.Module, head: nn.Module, width: int) -> Readout:
    """A head on the mean of the normed tokens (Swin, PVT v2, Twins): head(mean(norm(t)))."""

    def logits(prefix: Tensor, patches: Tensor) -> Tensor:
        return head(norm(patches).mean(dim=1))

    return Readout(norm, logits, width)


def norm_of_mean_readout(head: nn.Module, norm: nn.Module, width: int) -> Readout:
    """A head that norms the mean token itself (Hiera's): head(t) = fc(norm(mean(t)))."""

    def logits(prefix: Tensor, patches: Tensor) -> Tensor:
        return head(patches)

    return Readout(norm, logits, width)


def readout_without_lens(norm: nn.Module, width: int, why: str) -> Readout:
    """A network's final norm (DESIGN §5's f) with no logit lens: ``logits`` raises
    ValueError(``why``), the head reading nothing a single block's tokens give."""

    def logits(prefix: Tensor, patches: Tensor) -> Tensor:
        raise ValueError(why)

    return Readout(norm, logits, width)
