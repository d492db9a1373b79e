"""A SigLIP image tower as vitviz explains it: the CLIP kind's model without a CLS.

The image tower is vitviz's ``VisionTransformer`` with no prefix token (patches only, learned
position table, pre-norm blocks, GELU-tanh) whose final LayerNorm (``post_layernorm``) runs over
every token. Its pooled feature comes from a multi-head attention pooling head (MAP): a learned
probe token attends to the final tokens, and an MLP is added to that row::

    h = MHA(probe, tokens, tokens);   pooled = h + mlp(LayerNorm(h))        (B, D)

Each prompt is scored on its own (a sigmoid, not a softmax over the prompts)::

    logits[p] = exp(logit_scale) · <v / |v|, t_p / |t_p|> + logit_bias,   p = sigmoid(logits[p])

what Hugging Face's ``SiglipModel`` gives as ``logits_per_image``. The probe's attention over
the patches (``vitviz.blocks.attention_pool.AttentionPool.attend``, the ViT's MAP head) is the
model's "CLS row": the map of raw attention at the last layer and the row rollout, gradient
rollout and relevance start from (the ViT kind's ``ProbeAnalysis``).

The text tower is bidirectional (no causal mask) over prompts padded to its full length with the
pad token, read at the last position, then a Linear with bias (``SiglipTextTower``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vitviz.blocks import VisionTransformer, ViTConfig
from vitviz.blocks.attention_pool import AttentionPool
from vitviz.kinds.clip.network import ClipConfig, ClipImageModel
from vitviz.kinds.clip.siglip_tokenizer import UnigramTokenizer
from vitviz.kinds.clip.text import TextConfig, TextTower


@dataclass(frozen=True)
class SiglipConfig(ClipConfig):
    """A SigLIP model: a CLIP config whose image tower ``vit`` has no class token (average
    pool as a placeholder: the MAP head pools), whose text tower has a pad token ``pad_id``,
    and whose ``embed_dim`` is the image tower's width (the shared space: SigLIP projects only
    the text)."""

    pad_id: int = 1
    siglip: bool = True  # what ``ClipKind.config_from_dict`` tells a SigLIP's config by

    def to_dict(self) -> dict[str, object]:
        return {**super().to_dict(), "pad_id": self.pad_id, "siglip": True}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SiglipConfig:
        base = ClipConfig.from_dict(data)
        values = {f.name: getattr(base, f.name) for f in fields(ClipConfig)}
        return cls(**values, pad_id=int(data.get("pad_id", 1)))


@dataclass
class SiglipTowerConfig(ViTConfig):
    """The image tower's ViTConfig as the model holds it; ``outputs`` tells the window's chart
    its probabilities are each prompt's own sigmoid."""

    outputs: str = "sigmoid"

    @classmethod
    def of(cls, vit: ViTConfig) -> SiglipTowerConfig:
        values = {f.name: getattr(vit, f.name) for f in fields(ViTConfig)}
        return cls(**{**values, "num_classes": 0})


class SigmoidPromptHead(nn.Module):
    """pooled (B, D) -> (B, P): exp(logit_scale) · cos(v, t_p) + logit_bias (no projection)."""

    def __init__(self, embed_dim: int) -> None:
        super().__init__()
        self.logit_scale = nn.Parameter(torch.zeros(()))
        self.logit_bias = nn.Parameter(torch.zeros(()))
        self.register_buffer("text", torch.zeros(0, embed_dim), persistent=False)  # (P, E) unit

    def embed(self, pooled: Tensor) -> Tensor:
        """(B, D) -> (B, D) unit image embeddings."""
        return F.normalize(pooled, dim=-1)

    def score(self, embedding: Tensor) -> Tensor:
        """(B, D) unit image embeddings -> (B, P) the prompts' logits."""
        cos = embedding @ self.text.to(embedding.dtype).T
        return self.logit_scale.exp() * cos + self.logit_bias

    def forward(self, pooled: Tensor) -> Tensor:
        embedding = self.embed(pooled)
        self.last_embedding = embedding.detach()  # (B, D): new prompts rescore it, no forward
        return self.score(embedding)

    def relevance(self, pooled: Tensor, r: Tensor) -> tuple[Tensor, None]:
        """The head's LRP step (``vitviz.explain.attribution``): pooled (B, D) and r (B, P) the
        relevance given to each prompt (one-hot) -> R_v (B, D) at v = pooled itself (no
        projection: None for the Linear). With |v| held constant, y_p − bias = s·(t̂_p·v)/|v|
        is linear in v (the bias, as a Linear's, is ignored): R_v = Σ_p r_p·(s/|v|)·t̂_p ⊙ v,
        which sums to y_p − bias."""
        scale = self.logit_scale.exp() / pooled.norm(dim=-1, keepdim=True)  # (B, 1): s/|v|
        return scale * (r @ self.text.to(pooled.dtype)) * pooled, None


class SiglipTextTower(TextTower):
    """Token ids (B, T) -> (B, E): bidirectional blocks, the last position's state after the
    final norm, then a Linear with bias (Hugging Face's ``SiglipTextModel`` pooler output)."""

    def __init__(self, cfg: TextConfig) -> None:
        super().__init__(cfg)
        self.projection = nn.Linear(cfg.width, cfg.embed_dim)

    def pooled_positions(self, ids: Tensor) -> Tensor:
        return torch.full((ids.shape[0],), ids.shape[1] - 1, dtype=torch.long, device=ids.device)


class SiglipImageModel(ClipImageModel):
    """vitviz's ViT without a CLS token, pooled by an ``AttentionPool``, scored by a
    ``SigmoidPromptHead``; ``probabilities`` names the sigmoid (each prompt on its own)."""

    probabilities = "sigmoid"
    family_label = "SigLIP"

    def __init__(self, config: SiglipConfig) -> None:
        VisionTransformer.__init__(self, SiglipTowerConfig.of(config.vit))
        self.clip_config = config
        vit = config.vit
        self.pool = AttentionPool(vit.dim, vit.heads, vit.hidden_dim, vit.norm_eps, vit.activation)
        self.head = SigmoidPromptHead(config.embed_dim)
        self.text = None if config.text is None else SiglipTextTower(config.text)
        self.tokenizer: UnigramTokenizer | None = None  # type: ignore[assignment]
        self.tokenizer_problem: str | None = None
        self.prompts: tuple[str, ...] = ()
        self._embedded: dict[str, Tensor] = {}

    def token_ids(self, prompts: Sequence[str]) -> Tensor:
        """(P, T) ids, each padded to the tower's length with the pad token (as trained)."""
        assert self.tokenizer is not None and self.text is not None
        T = self.text.config.context_length
        rows = [self.tokenizer.encode(p) for p in prompts]
        for p, ids in zip(prompts, rows, strict=True):
            if len(ids) > T:
                raise ValueError(f"{p!r} is {len(ids)} tokens: this text tower reads {T}")
        return torch.tensor([ids + [self.clip_config.pad_id] * (T - len(ids)) for ids in rows])

    def head_logits(self, pooled: Tensor) -> Tensor:
        """(B, D) the probe's pooled feature -> (B, P) the prompts' logits."""
        return self.head(pooled)

    def image_embedding(self, x: Tensor) -> Tensor:
        """(B, C, H, W) -> (B, D) unit image embeddings (the pooled feature)."""
        tokens, _, _, _ = self.forward_features(x)
        return self.head.embed(self.pool(tokens))
